// analyze(): the pipeline of the analyses (analysis.hpp, one file each) and the report built
// from their results, with its summary, structural notes and work figures.
#include "core/analyze.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>

#include "core/analysis.hpp"
#include "core/cold.hpp"
#include "core/folds.hpp"

namespace biaslab {

using json = Json;

const char* biaslab_version() { return BIASLAB_VERSION; }

namespace {

using namespace analysis;

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
