// Structural redundancy of a bias: the dimension of the space of bias changes that leave the
// output unchanged for EVERY input, i.e. the null space of the Jacobian d(output)/d(bias)
// stacked over independent random inputs until its rank stops growing (one input can fake null
// directions: with few tokens a head sees only T-1 key differences).
//
// Computed in float64 whatever the config's dtype. Cost savers, none of which changes the
// answer: trailing per-token linear maps that are injective are dropped (they cannot create
// null directions); the Jacobian's columns are split into clusters that touch disjoint output
// entries (exact zeros, e.g. one attention head per bias direction), each ranked on its own;
// each cluster keeps only a small triangular factor R between inputs (QR of [R; J_k]); an input
// that would end the loop and leaves the clusters as they were is stacked only along the null
// space found so far (rows cannot lower a rank, so that is where it could grow); and a
// bias whose tangent meets no token-dependent op (e.g. a bias at the end, or before a Linear at
// the end) has a Jacobian 1_N (x) V that is the same for every input: V is ranked once.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "core/json.hpp"
#include "model/jvp.hpp"

namespace biaslab {

// Forward traces of independent inputs (streams 0, 1, 2, ... of the seed), made on demand and
// shared by all biases of one analysis. Stream 0 is the input the analysis perturbs and measures:
// the null basis is then computed from data that includes it, so a move along that basis
// (the verdict's redundant-part probe) is as close to null there as rounding allows.
// Traces are kept while they fit in max_bytes; later ones are made again on every request (the
// reference returned then stays valid until the next get).
class TracePool {
 public:
  TracePool(const Model& m, const ExperimentConfig& cfg, double max_bytes = 256.0 * 1024 * 1024)
      : m_(m), cfg_(cfg), max_bytes_(max_bytes), w_(model_weights(m)) {}
  const Trace& get(int k);
  int made() const { return made_; }
  // Frees the traces (made() stays): once every bias is solved.
  void release() {
    traces_ = {};
    scratch_ = Trace();
    scratch_k_ = -1;
    bytes_ = 0;
  }

 private:
  const Model& m_;
  const ExperimentConfig& cfg_;
  double max_bytes_, bytes_ = 0;
  int made_ = 0;  // distinct inputs drawn so far
  Weights<double> w_;
  std::vector<Trace> traces_;
  Trace scratch_;
  int scratch_k_ = -1;
};

// Token rows. After the last op on a tangent's way that mixes tokens (attention, convolution, a
// norm over tokens), every op acts on each token alone: the Jacobian's rows of a few tokens then
// cost a few tokens' work, where every row costs all N. Rows can only lower a rank (the singular
// values of a subset of rows are at most those of all rows), so the rank of the rows of the last
// `per_sample` tokens of each sample is a lower bound; the structure then checks the null space
// it found on every row (StructureSolver), which makes it exact.
// `at`: the op from which the rows are taken (-1: every row; then per_sample is 0).
constexpr double kRowSubsetMinFlops = 2e8;  // StructureOptions::row_subset_min_flops
struct RowPlan {
  int at = -1;
  int per_sample = 0;
};
// The rows for bias `param` with its Jacobian taken at op `cut`: enough tokens for its directions
// (1.5 x the directions over the width, at least 2 rows), the last ones of each sample (they see
// every earlier token through causal attention), taken only when that is at most half the
// tokens and the per-token ops would cost at least `min_flops` per input over every row.
RowPlan plan_rows(const Model& m, int param, int cut, double min_flops);
// A query bias's rows taken right after its attention, where each head has fewer keys than its
// width: each row pushes every head's key columns of L through the ops up to the shared tail at
// op `tail_p` (-1: none) and its product, or up to `cut` (StructureSolver; query_bias_factors).
// Its work for one input, or 0 where the plan does not take that path.
double query_rows_flops(const Model& m, int param, const RowPlan& plan, int cut, int tail_p = -1);
// A lower bound on every singular value of M (fewer rows than columns) from its rows' Gram
// matrix and the Cholesky certificate, where all are above 2 tau (M then has rank m exactly);
// nothing where they are not (structure.cpp; not in the page's first-load engine).
std::optional<double> row_rank_floor(const Eigen::MatrixXd& M, double tau);
// Whether a query or key bias of attention `op` takes that path where its plan starts right
// after the attention: factorable (query_bias_factorable), a key bias only beside a query bias,
// and fewer keys than a head's width.
bool query_rows_apply(const Model& m, const Op& op, int param);
// A query row's columns of L at position t, over its heads: the keys the row weighs (a causal
// mask's first t + 1), less one without sinks (query_bias_factors).
double query_row_columns(const Model& m, const Op& op, int t);
// The structure's work estimated up front (structural_flops) for a bias whose rows go through its
// heads' L: 3 inputs of query_rows_flops (a shared tail, which only other biases plan, left
// out), a key bias's less the rows' matrices it shares with its query bias (counted once, with
// the query bias; parts.cpp weighs a key bias apart with them). 0 where the rows do not.
double query_rows_estimate(const Model& m, int param, int cut);
// The part of that work an attention's query and key biases share where one engine runs both:
// the key bias takes its rows through L beside the query bias, and their rows' matrices are made
// once (StructureSolver). For either bias, the work of the rows both take (3 inputs, as
// structural_flops counts), with *partner set to the other bias (a param index), or 0 where the
// key bias takes its unit directions.
double shared_query_rows_flops(const Model& m, int param, int cut, int* partner);
// The inputs a split's plan expects bias `param`'s structure to stack (its Jacobian at op `cut`),
// 1 to 3. structural_flops counts 3 (the budget's estimate, an upper one for most biases); a bias
// whose rows of one input can reach its directions is settled by the first input where it is of
// full rank, as a block's effective biases are: ceil(directions / the rank one input's rows can
// reach). (The TinyLlama-sized block's value bias: one input; its query bias, whose rows give at
// most 960 of 2048 an input: three.) A lower bound on the inputs of a bias that ends full rank,
// but for one whose Gram matrix comes from its layers' factors (one input; the plan weighs those
// by structured_gram_flops).
double expected_inputs(const Model& m, int param, int cut);
// Whether this module has token rows and the Cholesky certificate: the page's first-load engine
// has neither, and hands on a config that would use them (analyze()).
bool token_rows_linked();
// The rows of one input's Jacobian the structure stacks for bias `param` (the plan's, or N),
// with its Jacobian at op `cut` (-1: injective_cut, computed again: pass the solver's).
double stacked_rows(const Model& m, int param, int cut = -1);

// For every token t of input `tr`, a bound L(t) on how far the per-token ops [at, cut) can
// stretch a tangent of token t at op `at` (the input of op at): |tangent of t at cut| <=
// L(t) |tangent of t at op at|, where the only tangent at op `at` is the one that enters it (no
// open block's skip carries one past it, as plan_rows makes sure).
Vec tail_bounds(const Model& m, const Trace& tr, int at, int cut);

// The estimated float64 work of the JVPs of one input for every direction of bias `p`: through
// every op after the bias up to `cut` (-1: injective_cut, where the structure takes it), at the
// plan's rows for `row_min_flops` (infinity: every row).
// `unit_directions`: for the bias's unit directions, which stay one-hot through an activation
// after a Linear's bias (model/jvp.cpp); false: for any other directions.
double structural_flops_per_input(const Model& m, const ModelParam& p, bool unit_directions = true,
                                  double row_min_flops = kRowSubsetMinFlops, int cut = -1);
// The work of one input where the structure builds the bias's Gram matrix from its layers'
// factors (an MLP's or a gated FFN's first bias, wide; StructureSolver), or 0 where it does not.
// Where that Gram matrix does not certify full rank, the stacked rows decide instead, within
// StructureOptions::max_jacobian_entries, or the bias stops on that limit.
double structured_gram_flops(const Model& m, int param, int cut);
// The part of that work two biases share where one engine runs both: a gated FFN's gate and up
// biases take the same A = W2^T Gamma^2 W2 in their Gram matrices, and the first of them keeps
// it for the second (StructureSolver). The work of A, with *partner set to the other bias (a
// param index), or 0 where the bias has no such partner.
double shared_gram_flops(const Model& m, int param, int cut, int* partner);
// The op where the structure takes the bias's Jacobian (cut -1 above): before the trailing
// per-token linear maps (jvp.hpp, trailing_cut) when they are injective, else the output.
int injective_cut(const Model& m, int start);

// Directions per JVP call (of `count`, seeded at op `start`, n entries each, N tokens, taken to
// op `stop`): a chunk of tangents holds at most about `elements` doubles at the widest op on the
// way (an MLP's hidden width, wider than the Jacobian it ends in), and at least one direction.
int chunk_directions(const Model& m, int start, int stop, int n, int N, int count, long elements);

constexpr double kMaxBiasFlops = 5e11;  // StructureOptions::max_flops
struct StructureOptions {
  double tol_rel = 1e-8;  // a singular value below tol_rel * reference scale is null
  // Stopping rules. Without a kink on the path the Jacobian is analytic in the input, so a
  // further random input that could add rank does so with probability 1: one input that adds
  // nothing ends the loop (after at least min_samples). With a kink (ReLU) an input adds rank
  // only if its activation pattern reaches the missing directions, which may be rare: the loop
  // then needs a run of kink_patience inputs (and at least twice the longest run seen before
  // the last gain, and 3 / the share of inputs that activate the rarest unit seen active) that
  // add no rank and activate no unit for the first time.
  int min_samples = 2;
  int kink_patience = 64;
  // Budgets. When one runs out before a stopping rule holds, the result is undetermined, with
  // the bounds established so far. The number of inputs of a step follows the rank gained per
  // input, so a rank that rises by one per input is stacked in one step, not one input a step.
  int max_samples = 4096;
  double max_flops = kMaxBiasFlops;  // per bias: JVPs + factorisations, about 10-25 s natively
  // A confirming input is stacked along the null space alone only while |J V_null| stays at the
  // level of rounding (this multiple of the input's reference scale); above it, the basis is not
  // as accurate as the data allows and the full stack is factored again.
  double confirm_rel = 1e-13;
  long chunk_elements = 1L << 22;  // tangent batch size in doubles (32 MiB)
  // Token rows (plan_rows): where the ops after the last one that mixes tokens would cost at
  // least this much per input over every row. The null space found from the rows is then
  // checked on every row of every input stacked: its tangents there, bounded through the
  // per-token ops (a product of each op's largest stretch) or computed, must stay within the
  // null threshold; else the bias is ranked again from every row.
  double row_subset_min_flops = kRowSubsetMinFlops;
  // Token rows of several biases that reach the same op take the per-token ops after it as one
  // matrix per row, made once per input (StructureSolver::tail_point). Off: op by op, always.
  bool shared_tails = true;
  // A query bias's token rows that start right after its attention (fewer keys than the head's
  // width; RoPE and qk_norm included) take the columns of each head's L (Tk at most) through the
  // per-token ops instead of the d unit directions (query_bias_factors). Off: the unit
  // directions, always.
  bool query_factors = true;
  // A wide cluster (512 columns on) that its Gram matrix does not certify of full rank is split
  // by that Gram matrix's pivoted Cholesky factorisation, each half certified (gram_split in structure.cpp),
  // instead of a QR and an SVD. Off: always the QR and the SVD.
  bool gram_split = true;
  // A Linear's bias before an activation, a Linear and at most a LayerNorm or RMSNorm (an MLP's
  // first bias), 512 directions on: full rank certified on every token of the first input from a
  // Gram matrix built from the layers' factors (mlp_gram in structure.cpp), where that costs less
  // than the stacked rows' Gram matrix. Off, or where it does not certify: the stacked rows.
  bool structured_gram = true;
  // The largest Jacobian of one input the structure stacks (entries), as analyze() checks up
  // front; ranking every row after a failed check on token rows would exceed it: undetermined.
  double max_jacobian_entries = 64.0 * 1024 * 1024;
};

enum class StopRule { full_rank, no_gain, no_gain_kinked, input_independent, budget, cancelled };
const char* stop_rule_name(StopRule r);

struct Structure {
  int size = 0;
  // Determined: redundant_dim is the answer and min = max = redundant_dim. Undetermined (a budget
  // ran out first): only the bounds hold, and null_basis is empty.
  bool determined = true;
  int redundant_dim = 0;
  int redundant_dim_min = 0, redundant_dim_max = 0;
  Mat null_basis;            // (size, redundant_dim), orthonormal columns
  int samples = 0;           // inputs stacked
  int clusters = 0;          // independent column groups the rank was split into
  int cut = 0;               // op index where the Jacobian was taken (trailing map dropped)
  double reference = 0;      // Frobenius norm of the JVP of a random per-token perturbation
  double null_max = 0;       // largest singular value counted as null, / reference
  double kept_min = 0;       // smallest singular value counted as non-null, / reference (0: none)
  std::vector<int> rank_history;    // rank after each step
  std::vector<int> inputs_history;  // inputs stacked after each step
  bool input_independent = false;   // the Jacobian does not depend on the input (one suffices)
  bool kinked = false;              // a ReLU lies between the bias and the Jacobian's cut
  int final_run = 0;                // inputs at the end that added no rank
  int inactive_units = 0;           // ReLU units on the path that no stacked input activated
  double rarest_unit_rate = 1;      // of units some input activated: the smallest share of inputs
  double flops = 0;                 // work spent (estimated)
  int rows_per_sample = 0;          // token rows (plan_rows) the rank was taken from; 0: every row
  int tail_at = -1;                 // the op a shared tail took the rows' tangents from (-1: none)
  int gram_splits = 0;              // rank decisions a wide cluster's Gram matrix split (gram_split)
  int row_ranks = 0;                // ... a wide cluster with fewer rows than columns took from its rows' (rank m)
  bool structured_gram = false;     // full rank certified from the layers' factors (structured_gram)
  bool query_factors = false;       // the rows' tangents went through the heads' L (query_bias_factors)
  int rows_shared = 0;              // of those rows, how many the attention's other bias had made (StructureSolver)
  // How the null space found from them was checked on every row: "bound" (through the per-token
  // layers), "computed" (its tangents), "none" (full rank: no check needed), "not reached" (a
  // budget ran out first: the rank is a lower bound anyway), "failed" (the rows missed rank,
  // and every row would not fit: undetermined).
  const char* rows_check = "";
  // kept_min and null_max are bounds (kept_min a lower one, null_max an upper one) rather than
  // singular values: from token rows and their check, or a Cholesky certificate of full rank.
  bool sigma_bounds = false;
  StopRule stop = StopRule::no_gain;
  std::string stop_note;            // the rule that ended the loop, in a sentence
};

// The row's structure.token_rows and structure.sigma_bounds in the report (nothing where this
// module has no token rows).
void token_rows_json(const Structure& st, Json& structure);

// Caches per-analysis work shared by biases (trailing maps and their injectivity).
class StructureSolver {
 public:
  StructureSolver(const Model& m, TracePool& pool, StructureOptions opt = {})
      : m_(m), pool_(pool), opt_(opt) {}
  // token_rows false: every row is ranked (StructureOptions::row_subset_min_flops never applies).
  Structure solve(int param, const std::function<bool()>& cancelled = {}, bool token_rows = true);
  const StructureOptions& options() const { return opt_; }
  // injective_cut(m, start), once per start: its injectivity test factors the trailing map (an
  // LU of the output's width), which the estimates and the report need for every bias too.
  int injective_cut(int start);
  // Frees the shared tails' matrices (once every bias is solved).
  void release_tails() {
    tails_.clear();
    tail_bytes_ = 0;
    query_rows_.clear();
    query_rows_bytes_ = 0;
    gram_a_ = Eigen::MatrixXd();
  }

 private:
  // The token rows' check (solve): the squared bound on |J V|_F over every row of the first
  // `inputs` inputs, for the null basis V found from the rows; *computed when some input's
  // tangents had to be computed, the bound being too loose.
  double check_rows(int param, const RowPlan& plan, int cut, const std::vector<Vec>& basis, int inputs, double tau,
                    const std::function<bool()>& cancelled, double* flops, bool* computed, bool* stopped);
  // Shared tails: where the token rows of several biases reach the same op p before their cut,
  // and the per-token ops [p, cut) cost far more than a matrix per row, that matrix
  // (tail_jacobian) is made once per input and row and applied to every bias's tangents at p.
  // tail_point: p for bias `param` with this plan and cut, or -1 (no shared tail).
  int tail_point(int param, const RowPlan& plan, int cut);
  // The matrices of input k's rows `sub.rows` (made on the first request, their work added to
  // *flops; kept while they fit).
  std::vector<Mat> tail_rows(int k, const Trace& tr, const TokenRows& sub, int p, int cut, double* flops);
  const Model& m_;
  TracePool& pool_;
  StructureOptions opt_;
  std::vector<std::pair<int, int>> cut_cache_;  // (start, usable cut)
  std::map<std::array<int, 3>, std::map<Eigen::Index, Mat>> tails_;  // (input, p, cut) -> row -> map
  [[maybe_unused]] double tail_bytes_ = 0;  // (unused where the module has no token rows)
  // A query row's matrix Z (count x stride; solve): its attention's heads' columns of L
  // (query_bias_factors) through the ops after the attention, so that the row's Jacobian for a
  // query or key bias is Z^T times that bias's K. The query and key biases of one attention have
  // the same L, so the first to ask makes Z and the other takes it (kept while they fit; each
  // bias still pays for the rows it uses, as with the shared tails). Kept only for the rows the
  // other bias takes, and freed once it has: (input, attention op, op the columns were taken to)
  // -> row -> Z (the map type the tails use already: the page's first-load engine, which never
  // fills it, has its size budgeted).
  std::map<std::array<int, 3>, std::map<Eigen::Index, Mat>> query_rows_;
  [[maybe_unused]] double query_rows_bytes_ = 0;
  // A gated FFN's gate and up biases have the same A = W2^T Gamma^2 W2 in their Gram matrices
  // from the layers' factors (mlp_gram): the first keeps it for the second, keyed by (W2's op,
  // the norm's op).
  Eigen::MatrixXd gram_a_;
  std::array<int, 2> gram_a_key_{-1, -1};
};

}  // namespace biaslab
