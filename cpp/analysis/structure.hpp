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

#include <functional>
#include <vector>

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
      : m_(m), cfg_(cfg), max_bytes_(max_bytes) {}
  const Trace& get(int k);
  int made() const { return made_; }

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

// The estimated float64 work of the JVPs of one input for every direction of bias `p`: through
// every op after the bias up to the trailing linear maps the structure skips.
// `unit_directions`: for the bias's unit directions, which stay one-hot through an activation
// after a Linear's bias (model/jvp.cpp); false: for any other directions.
double structural_flops_per_input(const Model& m, const ModelParam& p, bool unit_directions = true);

// Directions per JVP call (of `count`, seeded at op `start`, n entries each, N tokens, taken to
// op `stop`): a chunk of tangents holds at most about `elements` doubles at the widest op on the
// way (an MLP's hidden width, wider than the Jacobian it ends in), and at least one direction.
int chunk_directions(const Model& m, int start, int stop, int n, int N, int count, long elements);

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
  double max_flops = 5e10;  // per bias: JVPs + factorisations, about 5-10 s natively
  // A confirming input is stacked along the null space alone only while |J V_null| stays at the
  // level of rounding (this multiple of the input's reference scale); above it, the basis is not
  // as accurate as the data allows and the full stack is factored again.
  double confirm_rel = 1e-13;
  long chunk_elements = 1L << 20;  // tangent batch size in doubles (8 MiB)
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
  StopRule stop = StopRule::no_gain;
  std::string stop_note;            // the rule that ended the loop, in a sentence
};

// Caches per-analysis work shared by biases (trailing maps and their injectivity).
class StructureSolver {
 public:
  StructureSolver(const Model& m, TracePool& pool, StructureOptions opt = {})
      : m_(m), pool_(pool), opt_(opt) {}
  Structure solve(int param, const std::function<bool()>& cancelled = {});
  const StructureOptions& options() const { return opt_; }

 private:
  int injective_cut(int start);
  const Model& m_;
  TracePool& pool_;
  StructureOptions opt_;
  std::vector<std::pair<int, int>> cut_cache_;  // (start, usable cut)
};

}  // namespace biaslab
