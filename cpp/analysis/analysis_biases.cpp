// The bias rows: structure, measured verdict, and the sentence that explains them.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <Eigen/QR>
#include <Eigen/SVD>

#include "analysis/analysis.hpp"
#include "layers/attention.hpp"
#include "layers/layer.hpp"
#include "core/cold.hpp"
#include "core/rng.hpp"

namespace biaslab::analysis {
namespace {

std::string describe_directions(const Model& m, const ModelParam& p, const Structure& st);

// The projection a linear op of a layer stands for: "o_proj" for "layers.0.o_proj.weight".
std::string projection_of(const Model& m, const Op& op) {
  const std::string local = local_name(m, m.params[op.w]);
  return local.substr(0, local.rfind('.'));
}

// Whether the bias is added to its op's output (a Linear's bias, a norm's shift), so that what
// follows decides its fate. Attention's q/k/v biases and glu's gate/up biases enter inside their
// op instead: the next op's weight says nothing about them.
bool added_to_output(const Model& m, const ModelParam& p) {
  const Op& op = m.ops[p.op];
  const int i = static_cast<int>(&p - m.params.data());
  return i == op.b || i == op.shift;
}

// What a value bias adds to every token of the output: W_O repeat_kv(b_V), as a matrix.
Mat value_to_output(const Model& m, const ModelParam& p) {
  const Op& at = m.ops[p.op];
  return m.params[m.ops[p.op + 1].w].value * repeat_kv_matrix(at.heads, at.kv_heads, at.in / at.heads);
}

// A position table's rows (pos_embedding: T rows of F, held flat); 0 for a vector bias.
int table_rows(const Model& m, const ModelParam& p) {
  return m.ops[p.op].kind == OpKind::position ? m.tokens : 0;
}

// Subspaces of a table (T rows of F, flat), as (T * F, j) columns: constant over each row's
// features (what a per-token mean removes), constant over each of G feature groups across all
// rows (GroupNorm's group means over a sample), or the same at every position (a plain bias:
// what a mean over the tokens removes, BatchNorm train and InstanceNorm).
Mat table_row_constants(int T, int F) {
  Mat S = Mat::Zero(Eigen::Index(T) * F, T);
  for (int t = 0; t < T; ++t) S.block(Eigen::Index(t) * F, t, F, 1).setOnes();
  return S;
}
Mat table_group_constants(int T, int F, int G) {
  const int per = F / G;
  Mat S = Mat::Zero(Eigen::Index(T) * F, G);
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < G; ++g) S.block(Eigen::Index(t) * F + g * per, g, per, 1).setOnes();
  return S;
}
Mat table_position_constants(int T, int F) {
  Mat S = Mat::Zero(Eigen::Index(T) * F, F);
  for (int t = 0; t < T; ++t) S.block(Eigen::Index(t) * F, 0, F, F).setIdentity();
  return S;
}

// Whether the op removes each token's mean over its features (LayerNorm, softmax).
bool centres_each_token(const Op& op) {
  return op.kind == OpKind::softmax || (op.kind == OpKind::norm && op.norm == NormKind::layer);
}

// Why a bias is (or is not) redundant: from where it enters and what its tangent meets next.
BIASLAB_COLD std::string explain(const Model& m, const ModelParam& p, int k, int n, const std::string& directions) {
  const std::string local = local_name(m, p);
  const Op& op = m.ops[p.op];
  // A bias that enters inside its layer (attention's q, k, v) is explained by the layer itself.
  if (op.layer_kind && op.layer_kind->explain_own) {
    std::string own = op.layer_kind->explain_own(op, local, k, n);
    if (!own.empty()) return own;
  }
  // Walk past ops that map the bias linearly (residual adds, Linear, BatchNorm eval) to the op
  // that decides its fate; a Linear whose null space is the redundant part is named itself.
  const Next nx = next_op(m, p.op);
  if (nx.op && nx.op->kind == OpKind::linear && directions.rfind("null space of", 0) == 0)
    return "the next Linear sees only its row space: its weight's null space is lost";
  std::string via;
  const Op* at = nullptr;
  for (size_t i = p.op + 1; i < m.ops.size(); ++i) {
    const Op& o = m.ops[i];
    if (o.kind == OpKind::branch_next) {  // the next branch reads the block's input
      i = static_cast<size_t>(o.partner) - 1;
      continue;
    }
    if (o.kind == OpKind::residual_end) {
      if (via.empty()) via = "through the residual add, ";
      continue;
    }
    if (o.kind == OpKind::position) {  // adds a table: the tangent passes unchanged
      if (via.empty()) via = "past the position table, ";
      continue;
    }
    // A 1 x 1 convolution is a Linear applied at every position.
    const bool pointwise = o.kind == OpKind::conv && o.kernel_h * o.kernel_w == 1;
    if (o.kind == OpKind::linear || pointwise || (o.kind == OpKind::norm && o.norm == NormKind::batch_eval)) {
      if (!(o.kind == OpKind::norm && i == static_cast<size_t>(p.op) + 1 && k == 0)) {
        via = "through the linear maps that follow, ";
        continue;
      }
    }
    at = &o;
    break;
  }
  if (!at) return via + "added to the output";
  // A table reaching a per-token mean: its rows each lose their mean when nothing linear came
  // between (the directions say so), else whatever arrives as a per-token constant.
  const bool row_means = directions == "constant over each position's features";
  if (table_rows(m, p) > 0 && k > 0 && centres_each_token(*at))
    return via + (at->kind == OpKind::softmax ? "softmax is shift invariant in each token"
                                              : "LayerNorm subtracts each token's mean") +
           (row_means ? ": each position's row of the table loses its mean"
                      : ": what reaches it as a constant over a token's features cancels");
  if (table_rows(m, p) > 0 && row_means && at->kind == OpKind::residual_begin)
    return via + "feeds a residual stream whose readers cancel part of each position's row";
  // The layer the op belongs to says what it does to a bias that reaches it.
  if (at->layer_kind && at->layer_kind->explain_incoming) return via + at->layer_kind->explain_incoming(*at, k);
  return via + "passes on to the output";
}

// Names the redundant subspace where it is recognisable.
BIASLAB_COLD std::string describe_directions(const Model& m, const ModelParam& p, const Structure& st) {
  const int n = st.size, k = st.redundant_dim;
  if (k == 0) return "none";
  if (k == n) return "all";
  const Mat& B = st.null_basis;  // orthonormal columns
  auto spans = [&](const Mat& S) {  // S: (n, j) columns; does span(B) == span(S)?
    if (S.cols() != k) return false;
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(S);
    const Eigen::MatrixXd Q = qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
    return (B - Q * (Q.transpose() * B)).norm() < 1e-6 * std::sqrt(double(k));
  };
  if (spans(Mat::Ones(n, 1))) return "all-ones";
  if (const int T = table_rows(m, p); T > 0) {  // a table: the other names are for vectors
    const int F = n / T;
    if (k == T && spans(table_row_constants(T, F))) return "constant over each position's features";
    if (k == F && spans(table_position_constants(T, F))) return "the same at every position";
    for (int G = 2; G < F; ++G)
      if (F % G == 0 && k == G && spans(table_group_constants(T, F, G)))
        return "constant within each of the " + std::to_string(G) + " groups, at every position";
    return std::to_string(k) + " of " + std::to_string(n) + " directions";
  }
  const Next nx = added_to_output(m, p) ? next_op(m, p.op) : Next{};
  if (nx.op && nx.op->kind == OpKind::norm && nx.op->norm == NormKind::group) {
    const int G = nx.op->groups, per = n / G;
    Mat S = Mat::Zero(n, G);
    for (int g = 0; g < G; ++g) S.block(g * per, g, per, 1).setOnes();
    if (spans(S)) return "constant within each of the " + std::to_string(G) + " groups";
  }
  if (nx.op && nx.op->kind == OpKind::linear) {
    const Mat& W = m.params[nx.op->w].value;
    if ((W * B).norm() < 1e-8 * W.norm()) return "null space of " + m.params[nx.op->w].name;
  }
  if (local_name(m, p) == "v_proj.bias" && k == 1) {
    const Mat Wo = value_to_output(m, p);
    Vec y = Wo * B.col(0);
    const Vec ones = Vec::Ones(y.size()) / std::sqrt(double(y.size()));
    if ((y - ones * ones.dot(y)).norm() < 1e-6 * y.norm())
      return "W_O b_V along all-ones";
  }
  return std::to_string(k) + " of " + std::to_string(n) + " directions";
}

// The exact subspaces the theory predicts for a bias (all-ones; group-constant before a
// GroupNorm; W_O^+ 1 for a value bias), as (n, j) matrices.
BIASLAB_COLD std::vector<Mat> exact_candidates(const Model& m, const ModelParam& p) {
  const int n = static_cast<int>(p.value.size());
  std::vector<Mat> out{Mat::Ones(n, 1)};
  if (const int T = table_rows(m, p); T > 0) {  // a table: the subspaces what reads it removes
    const int F = n / T;
    out.push_back(table_row_constants(T, F));
    out.push_back(table_position_constants(T, F));
    const Next nx = next_op(m, p.op);
    if (nx.op && nx.op->kind == OpKind::norm && nx.op->norm == NormKind::group && nx.op->groups > 1 && F % nx.op->groups == 0)
      out.push_back(table_group_constants(T, F, nx.op->groups));
    return out;
  }
  const Next nx = added_to_output(m, p) ? next_op(m, p.op) : Next{};
  if (nx.op && nx.op->kind == OpKind::norm && nx.op->norm == NormKind::group && nx.op->groups > 1 &&
      n % nx.op->groups == 0) {
    const int G = nx.op->groups, per = n / G;
    Mat S = Mat::Zero(n, G);
    for (int g = 0; g < G; ++g) S.block(g * per, g, per, 1).setOnes();
    out.push_back(S);
  }
  if (local_name(m, p) == "v_proj.bias") {
    const Mat Wo = value_to_output(m, p);  // (F, kv_heads * d)
    out.push_back(Mat(Eigen::HouseholderQR<Eigen::MatrixXd>(Eigen::MatrixXd(Wo)).solve(Eigen::VectorXd::Ones(Wo.rows()))));
  }
  return out;
}

// The null basis with each exact candidate subspace it contains (to 1e-6) put in exactly. A
// basis taken from computed Jacobians is only as accurate as their rounding allows: where a
// Jacobian is nearly degenerate (one token into a LayerNorm, whose eps damps the rest), that
// is 1e-11 off the exact direction, enough for a move along it to show above the floor. The
// snapped basis spans the same space to that accuracy; the verdict's probe then measures it.
BIASLAB_COLD void snap_null_basis(const Model& m, const ModelParam& p, Structure& st) {
  const int n = st.size, k = st.redundant_dim;
  if (!st.determined || k == 0 || k == n) return;
  Eigen::MatrixXd B = st.null_basis;
  std::vector<Mat> cands = exact_candidates(m, p);
  // The widest candidate the basis contains wins (group-constant holds all-ones).
  std::stable_sort(cands.begin(), cands.end(), [](const Mat& a, const Mat& b) { return a.cols() > b.cols(); });
  for (const Mat& cand : cands) {
    const int j = static_cast<int>(cand.cols());
    if (j > k) continue;
    Eigen::HouseholderQR<Eigen::MatrixXd> qr{Eigen::MatrixXd(cand)};
    const Eigen::MatrixXd Q = qr.householderQ() * Eigen::MatrixXd::Identity(n, j);
    if ((Q - B * (B.transpose() * Q)).norm() > 1e-6 * std::sqrt(double(j))) continue;
    // The rest of the basis: B's part orthogonal to Q, k - j directions.
    const Eigen::MatrixXd R = B - Q * (Q.transpose() * B);
    Eigen::BDCSVD<Eigen::MatrixXd> svd(R, Eigen::ComputeThinU);
    Eigen::MatrixXd nb(n, k);
    nb.leftCols(j) = Q;
    if (k > j) nb.rightCols(k - j) = svd.matrixU().leftCols(k - j);
    st.null_basis = nb;
    return;
  }
}

}  // namespace

BIASLAB_COLD std::vector<BiasResult> analyse_biases(Context& c) {
  std::vector<BiasResult> out;
  const int nb = static_cast<int>(c.bias_params.size());
  for (int bi = 0; bi < nb; ++bi) {
    const int pi = c.bias_params[bi];
    const ModelParam& p = c.model.params[pi];
    c.step("structure of " + p.name, 0.05 + 0.6 * bi / std::max(1, nb));
    const auto t_solve = std::chrono::steady_clock::now();
    Structure st = c.solver->solve(pi, c.opt.cancelled);
    BiasResult r;
    r.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_solve).count();
    if (c.opt.cancelled && c.opt.cancelled()) throw Cancelled{};
    snap_null_basis(c.model, p, st);
    const int n = st.size, k = st.redundant_dim;
    r.param = p.name;
    r.size = n;
    const Vec u = unit_rms_direction(c.cfg.seed, "perturb." + p.name, n);
    c.directions.push_back(u);

    const Mat value = p.value + Mat(u);
    c.unit_runs.push_back(c.ev->run(pi, &value));
    c.null_runs.emplace_back();
    r.full = Evaluator::compare(c.ev->base(), c.unit_runs.back());
    // Measured verdict: a random full-size perturbation below the floor changes nothing; else
    // the structural null space is probed on its own. Without a structural answer there is no
    // verdict: the measured change is still reported.
    if (!st.determined) {
      r.verdict = "undetermined";
    } else if (!r.full.above_floor()) {
      r.verdict = "redundant";
    } else if (k > 0 && k < n) {
      Rng rng(c.cfg.seed, "null." + p.name);
      Vec g(k);
      for (int i = 0; i < k; ++i) g(i) = rng.normal();
      Vec un = st.null_basis * g;
      un *= std::sqrt(double(n)) / un.norm();
      // Both signs: a direction a ReLU cancels one way (an inactive unit pushed further down)
      // may act the other way.
      const Mat vp = p.value + Mat(un), vm = p.value - Mat(un);
      c.null_runs.back() = c.ev->run(pi, &vp);
      Delta dp = Evaluator::compare(c.ev->base(), *c.null_runs.back());
      Delta dm = Evaluator::compare(c.ev->base(), c.ev->run(pi, &vm));
      // The two moves differ only in sign, so their rounding is the same quantity measured twice:
      // both take the larger measurement (one float32/float64 pair can come out unluckily small).
      dp.floor = dm.floor = std::max(dp.floor, dm.floor);
      r.redundant_part = dp.above_floor() || !dm.above_floor() ? dp : dm;
      r.verdict = dp.above_floor() || dm.above_floor() ? "effective" : "partly_redundant";
    } else {
      r.verdict = "effective";
    }
    // Where a ReLU decided the stopping rule, null directions that a finite move shows to act are
    // no longer certain at first order either: inputs the sample did not reach (a thin region of
    // activation patterns, e.g. two units whose half-spaces nearly coincide) may act along them.
    // The rank found is certain, the rest is not: only the bounds hold.
    if (st.determined && st.stop == StopRule::no_gain_kinked && k > 0 && r.verdict == "effective") {
      const Delta& moved = k < n ? *r.redundant_part : r.full;
      char buf[160];
      std::snprintf(buf, sizeof buf, "max |delta| %.3g against a floor of %.3g",
                    moved.finite && std::isfinite(moved.max_abs) ? moved.max_abs : INFINITY,
                    std::isfinite(moved.floor) ? moved.floor : NAN);
      st.determined = false;
      st.redundant_dim_min = 0;
      st.redundant_dim_max = k;
      st.stop_note = "a finite move along the " + std::to_string(k) + " null direction" + (k == 1 ? "" : "s") +
                     " found over " + std::to_string(st.samples) + " inputs changes the output (" + buf +
                     "); a ReLU lies on the way, so inputs the sample did not reach (a thin region of "
                     "activation patterns) may act along them: the rank found, " + std::to_string(n - k) + " of " +
                     std::to_string(n) + ", is certain, the rest is not";
      r.verdict = "undetermined";
    }
    if (st.determined && r.verdict != verdict_for(k, n)) {
      if (r.verdict == "effective")
        r.note = "the " + std::to_string(k) + " null directions of the Jacobian (first order, at the sampled inputs) "
                 "change the output under a finite perturbation: the redundancy is local only (for example "
                 "a scale-invariant norm whose input a move of this size shrinks through zero)";
      else
        r.note = "on this input the perturbation's effect stays below the noise floor although, over " +
                 std::to_string(st.samples) + " inputs, the structure finds " + std::to_string(n - k) +
                 " effective directions: this input does not exercise them (inactive units, or an effect "
                 "smaller than rounding)";
    }
    r.directions = st.determined ? describe_directions(c.model, p, st) : "undetermined";
    // An undetermined row is explained by what could make its directions redundant (its upper bound).
    r.why = explain(c.model, p, st.determined ? k : st.redundant_dim_max, n, r.directions);
    r.jacobian_at = st.cut < static_cast<int>(c.model.ops.size())
                        ? "input of " + c.model.ops[st.cut].layer +
                              (c.model.ops[st.cut].kind == OpKind::linear && c.model.ops[st.cut].layer == c.model.ops[p.op].layer
                                   ? " " + projection_of(c.model, c.model.ops[st.cut])
                                   : "")
                        : "output";
    c.structures.push_back(std::move(st));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace biaslab::analysis
