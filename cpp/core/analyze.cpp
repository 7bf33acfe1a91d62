#include "core/analyze.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <numeric>
#include <optional>

#include <Eigen/QR>
#include <Eigen/SVD>

#include "core/cold.hpp"
#include "core/folds.hpp"
#include "core/measure.hpp"
#include "core/rng.hpp"
#include "core/structure.hpp"

namespace biaslab {

using json = Json;

const char* biaslab_version() { return BIASLAB_VERSION; }

namespace {

struct Cancelled {};

// A JSON number, or null when not finite (JSON has no NaN).
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A random direction with unit RMS per entry (so "size s" means entries of about s).
Vec unit_rms_direction(std::uint64_t seed, const std::string& key, int n) {
  Rng rng(seed, key);
  Vec u(n);
  for (int i = 0; i < n; ++i) u(i) = rng.normal();
  return u * (std::sqrt(double(n)) / u.norm());
}

// The op a bias's tangent meets first, skipping residual ends (the add passes it on).
struct Next {
  const Op* op = nullptr;
  bool through_residual = false;
};
Next next_op(const Model& m, int op_index) {
  Next n;
  for (size_t i = op_index + 1; i < m.ops.size(); ++i) {
    if (m.ops[i].kind == OpKind::residual_end) {
      n.through_residual = true;
      continue;
    }
    n.op = &m.ops[i];
    return n;
  }
  return n;
}

std::string ends_with_local(const std::string& name) {
  const auto dot = name.rfind('.');
  const auto dot2 = dot == std::string::npos ? std::string::npos : name.rfind('.', dot - 1);
  return dot2 == std::string::npos ? name : name.substr(dot2 + 1);
}

std::string describe_directions(const Model& m, const ModelParam& p, const Structure& st);

// ---------------------------------------------------------------------------------------------
// Why a bias is (or is not) redundant: from where it enters and what its tangent meets next.
BIASLAB_COLD std::string explain(const Model& m, const ModelParam& p, int k, int n, const std::string& directions) {
  const std::string local = ends_with_local(p.name);
  const Op& op = m.ops[p.op];
  if (op.kind == OpKind::attention) {
    if (local == "k_proj.bias") {
      if (op.rope && k < n)
        return "RoPE rotates the key bias by each key's position, so q_i . R_j b_K varies along the row";
      return std::string("adds q_i . b_K to every score of row i; softmax is shift invariant") +
             (op.causal ? " (masked scores stay masked)" : "");
    }
    if (local == "q_proj.bias") return "adds b_Q . k_j to the scores, which varies with the key j";
    if (local == "v_proj.bias") {
      std::string s = "softmax rows sum to 1, so every token gains W_O b_V: it folds into the output bias";
      if (k > 0) s += "; what follows cancels the part of W_O b_V it cannot see";
      return s;
    }
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
    if (o.kind == OpKind::residual_end) {
      if (via.empty()) via = "through the residual add, ";
      continue;
    }
    if (o.kind == OpKind::linear || (o.kind == OpKind::norm && o.norm == NormKind::batch_eval)) {
      if (!(o.kind == OpKind::norm && i == static_cast<size_t>(p.op) + 1 && k == 0)) {
        via = "through the linear maps that follow, ";
        continue;
      }
    }
    at = &o;
    break;
  }
  if (!at) return via + "added to the output";
  switch (at->kind) {
    case OpKind::norm:
      switch (at->norm) {
        case NormKind::batch_train: return via + "BatchNorm (train) subtracts each feature's batch mean";
        case NormKind::batch_eval:
          return via + "BatchNorm (eval) uses running statistics: nothing subtracts it (it fuses into the BatchNorm shift)";
        case NormKind::layer: return via + "LayerNorm subtracts each token's mean: only the all-ones direction cancels";
        case NormKind::rms: return via + "RMSNorm does not centre (it is only scale invariant)";
        case NormKind::group: return via + "GroupNorm subtracts each group's mean: the group-constant part cancels";
        case NormKind::instance: return via + "InstanceNorm subtracts each feature's mean over the tokens";
      }
      break;
    case OpKind::softmax: return via + "softmax is shift invariant: the all-ones direction cancels";
    case OpKind::activation:
      return via + (k > 0 ? "a nonlinearity follows: directions it never passes (inactive units) are lost"
                          : "a nonlinearity follows: every direction changes the output");
    case OpKind::attention: return via + "feeds the projections of an attention layer";
    case OpKind::residual_begin: return via + "feeds a residual block";
    default: break;
  }
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
  const Next nx = next_op(m, p.op);
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
  if (ends_with_local(p.name) == "v_proj.bias" && k == 1) {
    const Mat& Wo = m.params[m.ops[p.op + 1].w].value;
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
  const Next nx = next_op(m, p.op);
  if (nx.op && nx.op->kind == OpKind::norm && nx.op->norm == NormKind::group && nx.op->groups > 1 &&
      n % nx.op->groups == 0) {
    const int G = nx.op->groups, per = n / G;
    Mat S = Mat::Zero(n, G);
    for (int g = 0; g < G; ++g) S.block(g * per, g, per, 1).setOnes();
    out.push_back(S);
  }
  if (ends_with_local(p.name) == "v_proj.bias") {
    const Mat& Wo = m.params[m.ops[p.op + 1].w].value;  // (F, F)
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

const char* verdict_for(int k, int n) {
  return k == n ? "redundant" : k == 0 ? "effective" : "partly_redundant";
}

BIASLAB_COLD json delta_json(const Delta& d) {
  return {{"max_abs_delta", d.finite ? num(d.max_abs) : json(nullptr)},
          {"mean_abs_delta", d.finite ? num(d.mean_abs) : json(nullptr)},
          {"rel_delta", d.finite ? num(d.rel) : json(nullptr)},
          {"noise_floor", num(d.floor)}};
}

struct Context {
  Context(const ExperimentConfig& c, const AnalyzeOptions& o) : cfg(c), opt(o) {}
  const ExperimentConfig& cfg;
  const AnalyzeOptions& opt;
  Network net;
  Model model;
  Mat x;
  std::unique_ptr<Evaluator> ev;
  std::unique_ptr<TracePool> pool;
  std::unique_ptr<StructureSolver> solver;
  std::vector<int> bias_params;
  std::vector<Structure> structures;
  std::vector<Vec> directions;  // per bias: the random perturbation direction (unit RMS)
  // Per bias: the forward perturbed by that direction, and by +the null-space probe (when one
  // was made). The sweep's size-1 points are these very runs.
  std::vector<Eval> unit_runs;
  std::vector<std::optional<Eval>> null_runs;
  json solve_ms = json::object();  // wall time of each bias's structural solve (timing only)

  void step(const std::string& label, double f) {
    if (opt.cancelled && opt.cancelled()) throw Cancelled{};
    if (opt.progress) opt.progress(label, f);
  }
};

// "layers.0.body.1" -> "layers[0].body[1]" (the JSON path of a config layer).
std::string json_path(const std::string& dotted) {
  std::string out, part;
  std::vector<std::string> parts;
  for (char ch : dotted + ".") {
    if (ch == '.') {
      parts.push_back(part);
      part.clear();
    } else {
      part += ch;
    }
  }
  for (const auto& p : parts) {
    if (!p.empty() && std::isdigit(static_cast<unsigned char>(p[0]))) out += "[" + p + "]";
    else out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

// The structural analysis holds one Jacobian per input: size x (batch*tokens) x width entries
// at most (fewer when it is sparse). Refuse up front what would not fit, naming the layer.
constexpr double kMaxJacobianEntries = 64.0 * 1024 * 1024;

// Estimated floating-point work of the structural analysis, over a typical 3 inputs per bias
// (refused up front above this); a bias whose rank needs more inputs has a budget of its own
// at run time (StructureOptions::max_flops) and says so in its row when it runs out.
constexpr double kMaxStructuralFlops = 2e11;  // about 40 s natively, 2 min in wasm

double structural_flops(const Model& m, const ModelParam& p) { return 3.0 * structural_flops_per_input(m, p); }

BIASLAB_COLD std::optional<Error> check_work(const Model& m) {
  const double N = double(m.batch) * m.tokens;
  for (const ModelParam& p : m.params) {
    if (!is_bias_like(p.role)) continue;
    double widest = 0;
    for (size_t i = p.op; i < m.ops.size(); ++i) widest = std::max(widest, double(m.ops[i].out));
    const double entries = double(p.value.size()) * N * widest;
    if (entries > kMaxJacobianEntries) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "the structural analysis of %s needs a Jacobian of up to %.0f M entries per input "
                    "(%ld directions x %.0f tokens x width %.0f); the limit is %.0f M: reduce batch x tokens "
                    "or the width",
                    p.name.c_str(), entries / 1048576.0, static_cast<long>(p.value.size()), N, widest,
                    kMaxJacobianEntries / 1048576.0);
      return Error{json_path(m.ops[p.op].layer), buf};
    }
  }
  double flops = 0;
  for (const ModelParam& p : m.params)
    if (is_bias_like(p.role)) flops += structural_flops(m, p);
  if (flops > kMaxStructuralFlops) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "the structural analysis would take about %.0f GFLOP; the limit is %.0f GFLOP: reduce "
                  "the width, batch x tokens or the number of biases",
                  flops / 1e9, kMaxStructuralFlops / 1e9);
    return Error{"layers", buf};
  }
  return std::nullopt;
}

BIASLAB_COLD json analyse_biases(Context& c) {
  json rows = json::array();
  const int nb = static_cast<int>(c.bias_params.size());
  for (int bi = 0; bi < nb; ++bi) {
    const int pi = c.bias_params[bi];
    const ModelParam& p = c.model.params[pi];
    c.step("structure of " + p.name, 0.05 + 0.6 * bi / std::max(1, nb));
    const auto t_solve = std::chrono::steady_clock::now();
    Structure st = c.solver->solve(pi, c.opt.cancelled);
    const double solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_solve).count();
    if (c.opt.cancelled && c.opt.cancelled()) throw Cancelled{};
    snap_null_basis(c.model, p, st);
    const int n = st.size, k = st.redundant_dim;
    const Vec u = unit_rms_direction(c.cfg.seed, "perturb." + p.name, n);
    c.directions.push_back(u);

    const Mat value = p.value + Mat(u);
    c.unit_runs.push_back(c.ev->run(pi, &value));
    c.null_runs.emplace_back();
    const Delta full = Evaluator::compare(c.ev->base(), c.unit_runs.back());
    json row = {{"param", p.name}, {"size", n}};
    // Measured verdict: a random full-size perturbation below the floor changes nothing; else
    // the structural null space is probed on its own. Without a structural answer there is no
    // verdict: the measured change is still reported.
    std::string verdict;
    json parts = json::object();
    if (!st.determined) {
      verdict = "undetermined";
    } else if (!full.above_floor()) {
      verdict = "redundant";
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
      const Delta& dn = dp.above_floor() || !dm.above_floor() ? dp : dm;
      parts["redundant_part"] = delta_json(dn);
      verdict = dp.above_floor() || dm.above_floor() ? "effective" : "partly_redundant";
    } else {
      verdict = "effective";
    }
    // Where a ReLU decided the stopping rule, null directions that a finite move shows to act are
    // no longer certain at first order either: inputs the sample did not reach (a thin region of activation
    // patterns, e.g. two units whose half-spaces nearly coincide) may act along them. The rank
    // found is certain, the rest is not: only the bounds hold.
    if (st.determined && st.stop == StopRule::no_gain_kinked && k > 0 && verdict == "effective") {
      const json& moved = k < n ? parts["redundant_part"] : delta_json(full);
      char buf[160];
      std::snprintf(buf, sizeof buf, "max |delta| %.3g against a floor of %.3g",
                    moved["max_abs_delta"].is_number() ? moved["max_abs_delta"].get<double>() : INFINITY,
                    moved["noise_floor"].get<double>());
      st.determined = false;
      st.redundant_dim_min = 0;
      st.redundant_dim_max = k;
      st.stop_note = "a finite move along the " + std::to_string(k) + " null direction" + (k == 1 ? "" : "s") +
                     " found over " + std::to_string(st.samples) + " inputs changes the output (" + buf +
                     "); a ReLU lies on the way, so inputs the sample did not reach (a thin region of "
                     "activation patterns) may act along them: the rank found, " + std::to_string(n - k) + " of " +
                     std::to_string(n) + ", is certain, the rest is not";
      verdict = "undetermined";
    }
    row["redundant_dim"] = st.determined ? json(k) : json(nullptr);
    row["redundant_dim_min"] = st.redundant_dim_min;
    row["redundant_dim_max"] = st.redundant_dim_max;
    c.structures.push_back(st);
    row["verdict"] = verdict;
    row.update(delta_json(full));
    row["perturbation_rms"] = 1.0;
    if (!st.determined) {
      row["consistent"] = nullptr;
      row["undetermined_reason"] = st.stop_note;
    } else {
      const std::string expected = verdict_for(k, n);
      row["consistent"] = verdict == expected;
      if (verdict != expected) {
        if (verdict == "effective")
          row["note"] = "the " + std::to_string(k) + " null directions of the Jacobian (first order, at the sampled inputs) "
                        "change the output under a finite perturbation: the redundancy is local only (for example "
                        "a scale-invariant norm whose input a move of this size shrinks through zero)";
        else
          row["note"] = "on this input the perturbation's effect stays below the noise floor although, over " +
                        std::to_string(st.samples) + " inputs, the structure finds " + std::to_string(n - k) +
                        " effective directions: this input does not exercise them (inactive units, or an effect "
                        "smaller than rounding)";
      }
    }
    const std::string dirs = st.determined ? describe_directions(c.model, p, st) : "undetermined";
    // An undetermined row is explained by what could make its directions redundant (its upper bound).
    row["why"] = explain(c.model, p, st.determined ? k : st.redundant_dim_max, n, dirs);
    row["directions"] = dirs;
    row["absorbed_by"] = nullptr;
    if (!parts.empty()) row["parts"] = parts;
    c.solve_ms[p.name] = solve_ms;
    json structure = {{"samples", st.samples},        {"clusters", st.clusters},
                      {"input_independent", st.input_independent},
                      {"rank_history", st.rank_history},
                      {"inputs_history", st.inputs_history},
                      {"stop_rule", stop_rule_name(st.stop)},
                      {"stop_note", st.stop_note},
                      {"null_sigma_max", st.determined ? num(st.null_max) : json(nullptr)},
                      {"kept_sigma_min", st.determined ? num(st.kept_min) : json(nullptr)},
                      {"jacobian_at", st.cut < static_cast<int>(c.model.ops.size())
                                          ? "input of " + c.model.ops[st.cut].layer + (c.model.ops[st.cut].kind == OpKind::linear && c.model.ops[st.cut].layer == c.model.ops[p.op].layer ? " o_proj" : "")
                                          : "output"}};
    if (st.kinked) {
      structure["final_run"] = st.final_run;
      structure["inactive_units"] = st.inactive_units;
      structure["rarest_unit_rate"] = num(st.rarest_unit_rate);
    }
    row["structure"] = structure;
    if (st.determined && k > 0 && k < n && k <= 4) {
      json basis = json::array();
      for (int j = 0; j < k; ++j) {
        json v = json::array();
        for (int i = 0; i < n; ++i) v.push_back(st.null_basis(i, j));
        basis.push_back(v);
      }
      row["null_basis"] = basis;
    }
    rows.push_back(row);
  }
  return rows;
}

BIASLAB_COLD json fold_row(const FoldCandidate& cand, const FoldApplied& a, const Delta& d, long params_before,
              long params_after) {
  json moves = json::array();
  for (const auto& mv : a.moves) moves.push_back({{"from", mv.from}, {"to", mv.to.empty() ? json(nullptr) : json(mv.to)}});
  json row = {{"rule", cand.rule->id},
              {"title", cand.rule->title},
              {"formula", cand.rule->formula},
              {"where", a.layers},
              {"moves", moves},
              {"params_removed", params_before - params_after},
              {"dof_removed", a.dof_removed}};
  row.update(delta_json(d));
  row["exact"] = d.finite && !d.above_floor();
  return row;
}

BIASLAB_COLD json analyse_folds(Context& c, json& biases) {
  json rows = json::array();
  const long before = count_parameters(c.net);
  const auto cands = find_folds(c.net);
  for (size_t i = 0; i < cands.size(); ++i) {
    c.step("fold " + std::string(cands[i].rule->id), 0.65 + 0.1 * i / std::max<size_t>(1, cands.size()));
    FoldApplied a;
    Network folded = apply_fold(c.net, cands[i], a);
    const Model fm = compile(folded);
    const Delta d = Evaluator::compare(c.ev->base(), Evaluator::run_model(fm, c.x));
    json row = fold_row(cands[i], a, d, before, count_parameters(folded));
    // absorbed_by: the parameter an exact fold moves a bias into (null when it is dropped).
    if (row["exact"].get<bool>())
      for (const auto& mv : a.moves)
        for (auto& b : biases)
          if (b["param"] == mv.from && mv.to != mv.from) {
            if (!mv.to.empty()) {
              if (b["absorbed_by"].is_null()) b["absorbed_by"] = mv.to;
              b["absorbed_into"].push_back(mv.to);
            }
            if (b["folds"].empty() || b["folds"].back() != cands[i].rule->id) b["folds"].push_back(cands[i].rule->id);
          }
    rows.push_back(row);
  }
  return rows;
}

BIASLAB_COLD json minimal_model(Context& c) {
  c.step("minimal model", 0.77);
  Network net = c.net;
  json applied = json::array();
  for (int iter = 0; iter < 256; ++iter) {
    bool changed = false;
    const long now = count_parameters(net);
    for (const auto& cand : find_folds(net)) {
      if (!cand.rule->in_minimal) continue;
      FoldApplied a;
      Network next = apply_fold(net, cand, a);
      if (count_parameters(next) >= now) continue;
      applied.push_back({{"rule", cand.rule->id}, {"where", a.layers}, {"params_removed", now - count_parameters(next)}});
      net = std::move(next);
      changed = true;
      break;
    }
    if (!changed) break;
  }
  const Model fm = compile(net);
  const Delta d = Evaluator::compare(c.ev->base(), Evaluator::run_model(fm, c.x));
  json out = {{"params_before", count_parameters(c.net)},
              {"params_after", count_parameters(net)},
              {"folds_applied", applied}};
  out.update(delta_json(d));
  out["exact"] = d.finite && !d.above_floor();
  out["config"] = config_to_json(net.config);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Invariance probes, each on one op and its actual input, run in both precisions.
struct Probe {
  std::string probe, layer, transform, expected, note;
  Delta delta;
};

BIASLAB_COLD json probe_json(const Probe& p) {
  const bool holds = p.delta.finite && !p.delta.above_floor();
  // "invariant"/"equivariant" are laws and must hold; "changes" means no law applies, and the
  // probe shows the change (a degenerate input, e.g. all zeros, may still leave it unchanged).
  const bool law = p.expected != "changes";
  json j = {{"probe", p.probe}, {"layer", p.layer}, {"transform", p.transform},
            {"expected", p.expected}, {"law", law}, {"holds", holds}, {"agrees", holds == law}};
  j.update(delta_json(p.delta));
  if (!p.note.empty()) j["note"] = p.note;
  return j;
}

template <class S>
MatT<S> permute_tokens(const MatT<S>& x, const std::vector<int>& perm, int batch) {
  const int T = static_cast<int>(perm.size());
  MatT<S> y(x.rows(), x.cols());
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < T; ++t) y.row(b * T + t) = x.row(b * T + perm[t]);
  return y;
}

BIASLAB_COLD json analyse_invariances(Context& c) {
  c.step("invariances", 0.8);
  const Model& m = c.model;
  const int B = m.batch, T = m.tokens;
  std::vector<Probe> probes;
  Trace trace;
  forward<double>(m, c.ev->weights64(), c.ev->input(), {}, &trace);
  // A random permutation that moves at least one token (with one token none exists, and the
  // permutation probes are left out).
  std::vector<int> perm(T);
  std::iota(perm.begin(), perm.end(), 0);
  {
    Rng rng(c.cfg.seed, "permutation");
    for (int i = T - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int>(rng.next() % (i + 1))]);
    bool identity = true;
    for (int t = 0; t < T; ++t) identity = identity && perm[t] == t;
    if (identity && T > 1) std::swap(perm[0], perm[1]);
  }
  const bool can_permute = T > 1;
  const auto& wf = c.ev->weights32();
  const auto& wd = c.ev->weights64();
  const DType dt = m.dtype;
  bool positional = false;
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    const Mat& xd = trace.inputs[i];
    const MatT<float> xf = xd.cast<float>();
    if (op.kind == OpKind::attention) positional = positional || op.causal || op.rope;
    if (op.kind == OpKind::attention && can_permute) {
      const std::string exp_note = op.causal ? "a causal mask breaks it" : op.rope ? "RoPE breaks it" : "";
      const Eval base = combine_eval(dt, attention_core<float>(m, op, wf, xf, xf, B),
                                     attention_core<double>(m, op, wd, xd, xd, B));
      const MatT<float> pf = permute_tokens(xf, perm, B);
      const Mat pd = permute_tokens(xd, perm, B);
      // Keys and values permuted together: the output does not change.
      const Eval kv = combine_eval(dt, attention_core<float>(m, op, wf, xf, pf, B),
                                   attention_core<double>(m, op, wd, xd, pd, B));
      probes.push_back({"attention: permute keys and values together", op.layer, "x_kv -> P x_kv",
                        op.causal || op.rope ? "changes" : "invariant", exp_note, Evaluator::compare(base, kv)});
      // Queries permuted: the output rows permute the same way.
      Eval q = combine_eval(dt, attention_core<float>(m, op, wf, pf, xf, B),
                            attention_core<double>(m, op, wd, pd, xd, B));
      Eval base_p = base;
      base_p.y = permute_tokens(base.y, perm, B);
      base_p.y_other = permute_tokens(base.y_other, perm, B);
      probes.push_back({"attention: permute queries", op.layer, "x_q -> P x_q, compared with P out",
                        op.causal || op.rope ? "changes" : "equivariant", exp_note, Evaluator::compare(base_p, q)});
    }
    if (op.kind == OpKind::norm) {
      // Shift and scale of the input, over the elements that share statistics.
      Rng rng(c.cfg.seed, "probe." + op.layer);
      const int N = static_cast<int>(xd.rows()), F = static_cast<int>(xd.cols());
      Mat shift(N, F), scale(N, F);
      // The shift on a grid: x is rounded to 2^-21 of its largest entry's binade and c (|c| up to
      // that binade) lies on the same grid, so x and x + c are exact in float32 and float64
      // alike. The probe then adds no rounding of its own, which a near-constant set would
      // amplify beyond what the floor measures, and both precisions see exactly the inputs the
      // law compares.
      const double amax = xd.cwiseAbs().maxCoeff();
      int binade = 0;
      if (std::isfinite(amax)) std::frexp(amax, &binade);  // max |x| < 2^binade
      const double grid = std::ldexp(1.0, binade - 21), unit = std::ldexp(1.0, binade - 1);
      const Mat xs = std::isfinite(amax) ? Mat(((xd / grid).array().round() * grid).matrix()) : xd;
      const Vec cs = Vec::NullaryExpr(std::max(N, F) * 4, [&]() { return std::round(rng.uniform(-2.0, 2.0) * unit / grid) * grid; });
      // Powers of two: scaling by them is exact in floating point, so the probe adds no rounding
      // of its own (near-constant sets would amplify it) and tests the law itself.
      const double pow2[] = {0.25, 0.5, 2.0, 4.0};
      const Vec ss = Vec::NullaryExpr(std::max(N, F) * 4, [&]() { return pow2[rng.next() % 4]; });
      std::string what;
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          int set = 0;
          switch (op.norm) {
            case NormKind::layer: case NormKind::rms: set = r; what = "per token"; break;
            case NormKind::batch_train: case NormKind::batch_eval: set = f; what = "per feature, across batch and tokens"; break;
            case NormKind::instance: set = (r / T) * F + f; what = "per sample and feature"; break;
            case NormKind::group: set = (r / T) * op.groups + f / (F / op.groups); what = "per sample and group"; break;
          }
          shift(r, f) = cs(set % cs.size());
          scale(r, f) = ss(set % ss.size());
        }
      Op exact = op;
      exact.eps = 0;  // eps > 0 breaks exact scale invariance; the probe checks the eps-free law
      auto run = [&](const Op& o, const Mat& in) {
        const MatT<float> inf = in.cast<float>();
        return combine_eval(dt, op_forward<float>(m, o, wf, inf), op_forward<double>(m, o, wd, in));
      };
      const bool centred = op.norm != NormKind::rms && op.norm != NormKind::batch_eval;
      const bool scaled = op.norm != NormKind::batch_eval;
      probes.push_back({"norm: shift the input " + what, op.layer, "x -> x + c", centred ? "invariant" : "changes",
                        "", Evaluator::compare(run(op, xs), run(op, xs + shift))});
      probes.push_back({"norm: scale the input " + what, op.layer, "x -> s x (s in 1/4, 1/2, 2, 4)",
                        scaled ? "invariant" : "changes",
                        "eps set to 0 (eps > 0 breaks exact scale invariance; a constant set then normalises to 0)",
                        Evaluator::compare(run(exact, xd), run(exact, Mat(xd.cwiseProduct(scale))))});
    }
  }
  // The whole model: permuting tokens permutes the output unless positions enter somewhere.
  if (can_permute) {
    const MatT<float> xf = c.ev->input().cast<float>();
    const Mat pd = permute_tokens(c.ev->input(), perm, B);
    const MatT<float> pf = pd.cast<float>();
    const Eval out = combine_eval(dt, forward<float>(m, wf, pf), forward<double>(m, wd, pd));
    Eval base_p = c.ev->base();
    base_p.y = permute_tokens(base_p.y, perm, B);
    base_p.y_other = permute_tokens(base_p.y_other, perm, B);
    probes.push_back({"model: permute tokens", "model", "x -> P x, compared with P out",
                      positional ? "changes" : "equivariant",
                      positional ? "a causal mask or RoPE gives tokens positions" : "",
                      Evaluator::compare(base_p, out)});
  }
  json rows = json::array();
  for (const auto& p : probes) rows.push_back(probe_json(p));
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Sweep points beyond this multiple of the unperturbed floor skip the floor's measurement (the
// report's noise_floor_note says the same number).
constexpr double kSweepFar = 1e6;

BIASLAB_COLD json analyse_sweep(Context& c) {
  json sizes = json::array();
  std::vector<double> s;
  for (int e = -8; e <= 2; ++e) {
    s.push_back(std::pow(10.0, e));
    sizes.push_back(s.back());
  }
  json series = json::array();
  const double far = kSweepFar * kFloorFactor * 2 * c.ev->base().rounding;
  for (size_t bi = 0; bi < c.bias_params.size(); ++bi) {
    const int pi = c.bias_params[bi];
    const ModelParam& p = c.model.params[pi];
    c.step("sweep " + p.name, 0.85 + 0.15 * bi / c.bias_params.size());
    const Structure& st = c.structures[bi];
    // `unit`: the run already made at size 1 in this direction (the same values bit for bit).
    // A point whose change is over kSweepFar times the unperturbed model's own floor has no
    // floor measured (null): its companion run in the other precision is skipped.
    auto run = [&](const Vec& u, const Eval* unit) {
      json delta = json::array(), floor = json::array();
      for (double sz : s) {
        std::optional<Eval> e;
        double moved = 0;
        if (sz == 1.0 && unit) {
          e = *unit;
        } else {
          const Mat v = p.value + Mat(u * sz);
          e = c.ev->run_near(pi, &v, far, &moved);
        }
        if (!e) {
          delta.push_back(num(moved));
          floor.push_back(nullptr);
          continue;
        }
        const Delta d = Evaluator::compare(c.ev->base(), *e);
        delta.push_back(d.finite ? num(d.max_abs) : json(nullptr));
        floor.push_back(d.finite && d.max_abs > far ? json(nullptr) : num(d.floor));  // the same rule for reused runs
      }
      return std::make_pair(delta, floor);
    };
    auto [delta, floor] = run(c.directions[bi], &c.unit_runs[bi]);
    json row = {{"param", p.name}, {"delta", delta}, {"noise_floor", floor}};
    if (st.determined && st.redundant_dim > 0 && st.redundant_dim < st.size) {
      Rng rng(c.cfg.seed, "null." + p.name);
      Vec g(st.redundant_dim);
      for (int i = 0; i < g.size(); ++i) g(i) = rng.normal();
      Vec un = st.null_basis * g;
      un *= std::sqrt(double(st.size)) / un.norm();
      auto [dr, fr] = run(un, c.null_runs[bi] ? &*c.null_runs[bi] : nullptr);
      row["delta_redundant"] = dr;
      row["noise_floor_redundant"] = fr;
    }
    series.push_back(row);
  }
  return {{"sizes", sizes},
          {"direction", "random, unit RMS per entry, scaled by size"},
          {"noise_floor_note", "null where the change exceeds 1e6 x the unperturbed model's floor: "
                               "not measured there (it cannot decide anything)"},
          {"series", series}};
}

}  // namespace

BIASLAB_COLD json analyze(const ExperimentConfig& cfg, const AnalyzeOptions& opt) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto ms = [&]() { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
  Context c(cfg, opt);
  try {
    c.step("building", 0.0);
    c.net = build_network(cfg);
    sync_network(c.net);
    c.model = compile(c.net);
    if (const auto e = check_work(c.model))
      return {{"ok", false}, {"error", {{"path", e->path}, {"message", e->message}}}};
    c.x = draw_input(cfg, 0);
    c.ev = std::make_unique<Evaluator>(c.model, c.x);
    c.pool = std::make_unique<TracePool>(c.model, cfg);
    c.solver = std::make_unique<StructureSolver>(c.model, *c.pool, c.opt.structure);
    for (size_t i = 0; i < c.model.params.size(); ++i)
      if (is_bias_like(c.model.params[i].role)) c.bias_params.push_back(static_cast<int>(i));

    json report = {{"ok", true}, {"format", 1}, {"biaslab_version", biaslab_version()}};
    report["config"] = config_to_json(cfg);
    const Eval& base = c.ev->base();
    report["noise"] = {
        {"dtype", dtype_name(cfg.dtype)},
        {"output_rounding", num(base.rounding)},
        {"output_max_abs", num(base.y.cwiseAbs().maxCoeff())},
        {"method", cfg.dtype == DType::float32
                       ? "max |float32 - float64| of the same forward, measured per comparison; floor = 8 (r1 + r2)"
                       : "max |float32 - float64| of the same forward scaled by 2^-29 (float64/float32 unit roundoff), measured per comparison; floor = 8 (r1 + r2), and at least 8 x 2^-29 x the same difference in float32 when that is below float32's own floor"}};
    json timing = json::object();
    double mark = ms();
    auto lap = [&](const char* what) {
      const double now = ms();
      timing[what] = now - mark;
      mark = now;
    };
    lap("setup");
    json biases = analyse_biases(c);
    lap("biases");
    json folds = opt.folds ? analyse_folds(c, biases) : json::array();
    report["biases"] = biases;
    report["folds"] = folds;
    if (opt.folds) report["minimal_model"] = minimal_model(c);
    lap("folds");
    if (opt.invariances) report["invariances"] = analyse_invariances(c);
    lap("invariances");
    if (opt.sweep) report["sweep"] = analyse_sweep(c);
    lap("sweep");
    int structural_inputs = 0;
    for (const auto& s : c.structures) structural_inputs = std::max(structural_inputs, s.samples);
    const StructureOptions& so = c.solver->options();
    report["structural"] = {{"precision", "float64"},
                            {"inputs_made", c.pool->made()},
                            {"max_inputs_per_bias", structural_inputs},
                            {"tolerance", "singular value <= 1e-8 x reference (JVP of a random per-token perturbation of the same tensor)"},
                            {"stopping_rules",
                             "full_rank: the rank reached the bias's size; input_independent: no op on the way treats tokens "
                             "differently, so one input decides; no_gain: nothing kinked on the way, and an input added no rank "
                             "(the Jacobian is analytic in the input: a further random input that could add rank does so with "
                             "probability 1); no_gain_kinked: a ReLU on the way, and a run of at least " +
                                 std::to_string(so.kink_patience) +
                                 " inputs (and twice the longest run before the last gain, and 3 / the share of inputs that activate the "
                                 "rarest unit seen active) added no rank and activated no unit for "
                                 "the first time (a row is undetermined when some unit was never active, or when a finite move along "
                                 "its null directions changes the output); budget: a limit ran out first, and the row is "
                                 "undetermined with the bounds found"},
                            {"budget", {{"max_inputs", so.max_samples}, {"max_flops_per_bias", so.max_flops}}},
                            {"steps_note", "rank_history holds the rank after each step and inputs_history the inputs stacked by then: "
                                           "a step stacks as many inputs as the rate of gain says the rest of the rank needs"},
                            {"sigma_note", "null_sigma_max and kept_sigma_min are relative to the reference; inputs that only confirm "
                                           "the null space are stacked along it alone, so kept_sigma_min then comes from the inputs before "
                                           "them (a lower bound)"}};
    long n_params = count_parameters(c.net);
    int red = 0, part = 0, eff = 0, undetermined = 0;
    for (const auto& b : biases) {
      const std::string v = b["verdict"];
      red += v == "redundant";
      part += v == "partly_redundant";
      eff += v == "effective";
      undetermined += v == "undetermined";
    }
    int exact = 0;
    for (const auto& f : folds) exact += f["exact"].get<bool>();
    report["summary"] = {{"parameters", n_params}, {"biases", biases.size()},   {"redundant", red},
                         {"partly_redundant", part}, {"effective", eff},        {"undetermined", undetermined},
                         {"folds", folds.size()},
                         {"exact_folds", exact}};
    timing["structure_per_bias"] = c.solve_ms;
    timing["total"] = ms();
    report["timing_ms"] = timing;
    double est = 0;
    for (const ModelParam& p : c.model.params)
      if (is_bias_like(p.role)) est += structural_flops(c.model, p);
    report["work"] = {{"forward_passes", 2 * c.ev->runs() + c.pool->made()},
                      {"forward_flops", forward_flops(c.model)},
                      {"structural_flops_estimate", est},
                      {"limits", {{"structural_flops", kMaxStructuralFlops}, {"jacobian_entries", kMaxJacobianEntries}}}};
    if (opt.progress) opt.progress("done", 1.0);
    return report;
  } catch (const Cancelled&) {
    return {{"ok", false}, {"error", {{"path", ""}, {"message", "cancelled"}}}};
  } catch (const std::bad_alloc&) {
    return {{"ok", false}, {"error", {{"path", ""}, {"message", "out of memory: the config is too large for this machine"}}}};
  } catch (const std::exception& e) {
    return {{"ok", false}, {"error", {{"path", ""}, {"message", std::string("internal error: ") + e.what()}}}};
  }
}

BIASLAB_COLD json analyze_text(const std::string& text, const AnalyzeOptions& opt) {
  try {
    const Result<ExperimentConfig> cfg = parse_config_text(text);
    if (!cfg) return {{"ok", false}, {"error", {{"path", cfg.error().path}, {"message", cfg.error().message}}}};
    return analyze(*cfg, opt);
  } catch (const std::exception& e) {
    return {{"ok", false}, {"error", {{"path", ""}, {"message", std::string("internal error: ") + e.what()}}}};
  }
}

}  // namespace biaslab
