// analyze(): the pipeline of the analyses (analysis.hpp, one file each) and the report built
// from their results, with its summary, structural notes and work figures.
#include "analysis/analyze.hpp"
#include "layers/conv.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>

#include "analysis/analysis.hpp"
#include "analysis/memory.hpp"
#include "core/cold.hpp"
#include "folds/folds.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace biaslab {

using json = Json;

const char* biaslab_version() { return BIASLAB_VERSION; }

namespace {

using namespace analysis;

// *wants_rows: some bias could use token rows or the Cholesky certificate (work over their
// threshold on every row where this module has none, structural_flops counting 3 inputs; or
// 512 directions).
BIASLAB_COLD std::optional<Error> check_work(const Model& m, StructureSolver& solver, bool* wants_rows) {
  double flops = 0;
  for (const ModelParam& p : m.params)
    if (is_bias_like(p.role)) {
      const double f = structural_flops(m, p, solver.injective_cut(p.op));
      flops += std::min(f, kMaxBiasFlops);
      *wants_rows = *wants_rows || f >= 3 * kRowSubsetMinFlops || p.value.size() >= 512;
    }
  // A module without token rows estimates every row; the one it hands such a config to checks
  // with the rows it would stack (its limits are the same).
  if (*wants_rows && !token_rows_linked()) return std::nullopt;
  for (const ModelParam& p : m.params) {
    if (!is_bias_like(p.role)) continue;
    // (A bias whose Gram matrix comes from its layers' factors stops on this limit at run time if
    // that matrix does not certify it and its rows would not fit.)
    const int cut = solver.injective_cut(p.op);
    if (solver.options().structured_gram && structured_gram_flops(m, static_cast<int>(&p - m.params.data()), cut) > 0)
      continue;
    // The structure stacks the Jacobian at the output, or before trailing per-token linear maps
    // that are injective, whose input is then at most as wide as the output: wider layers on
    // the way (an MLP's hidden width) pass in chunks and are not stacked.
    const double width = m.out_features;
    // Token rows (plan_rows): only some tokens' rows are stacked, unless their check fails (then
    // the structure ranks every row only if that fits this limit).
    const double rows = stacked_rows(m, static_cast<int>(&p - m.params.data()), cut);
    const double entries = double(p.value.size()) * rows * width;
    if (entries > kMaxJacobianEntries) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "the structural analysis of %s needs a Jacobian of up to %.0f M entries per input "
                    "(%ld directions x %.0f tokens x width %.0f); the limit is %.0f M: reduce batch x tokens "
                    "or the width",
                    p.name.c_str(), entries / 1048576.0, static_cast<long>(p.value.size()), rows, width,
                    kMaxJacobianEntries / 1048576.0);
      return Error{json_path(m.ops[p.op].layer), buf};
    }
  }
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

namespace {
// Whether a layer list holds a convolution, in a body or a branch too.
bool has_conv(const std::vector<LayerConfig>& layers) {
  for (const LayerConfig& l : layers) {
    if (l.type == LayerType::conv1d || l.type == LayerType::conv2d || has_conv(l.body)) return true;
    for (const auto& branch : l.branches)
      if (has_conv(branch)) return true;
  }
  return false;
}
#ifdef _OPENMP
// The threads of one analysis: one under kThreadsMinWork of estimated work (Eigen's products
// and the engine's parallel loops follow omp_get_max_threads()), else what OpenMP offered; the
// caller's count comes back when the analysis ends.
class AnalysisThreads {
 public:
  explicit AnalysisThreads(double work) : before_(omp_get_max_threads()) {
    if (work < kThreadsMinWork) omp_set_num_threads(1);
  }
  ~AnalysisThreads() { omp_set_num_threads(before_); }
  AnalysisThreads(const AnalysisThreads&) = delete;
  AnalysisThreads& operator=(const AnalysisThreads&) = delete;

 private:
  int before_;
};
#endif
}  // namespace

BIASLAB_COLD json analyze(const ExperimentConfig& cfg, const AnalyzeOptions& opt) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto ms = [&]() { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
  Context c(cfg, opt);
#ifdef _OPENMP
  std::optional<AnalysisThreads> threads;  // (from the work estimate, once the model is built)
#endif
  try {
    c.step("building", 0.0);
    // The page's first-load engine leaves out what runs a convolution (cpp/wasm/conv_lean.cpp): it
    // says so before any work, and the page asks the engine that has it.
    const char* hand_on = nullptr;  // what the engine fetched on demand has and this one has not
    if (!conv_kernel_linked() && has_conv(cfg.layers)) hand_on = "this config needs the engine with convolutions";
    // Nor the memory bound (memory.hpp): a config of many parameters goes there before it is built.
    else if (!token_rows_linked() && cfg.parameters > kLeanParameters) hand_on = "this config needs the full engine";
    if (!hand_on) {
      c.net = build_network(cfg);
      sync_network(c.net);
      c.model = compile(c.net, false);  // the network lends it its values until the folds
      lend_values(c.model);
      c.pool = std::make_unique<TracePool>(c.model, cfg);  // (draws nothing until asked)
      c.solver = std::make_unique<StructureSolver>(c.model, *c.pool, c.opt.structure);
      bool wants_rows = false;
      if (const auto e = check_work(c.model, *c.solver, &wants_rows)) return error_json(*e);
      // Nor token rows and the Cholesky certificate (structure.hpp): a config that could use them
      // goes to the engine that has them too.
      if (wants_rows && !token_rows_linked()) hand_on = "this config needs the engine with token rows";
      c.memory = memory_need(c.net, c.model, *c.solver, opt.folds);
      if (opt.memory_budget > 0 && c.memory.bytes > opt.memory_budget)
        return error_json({c.memory.path, memory_refusal(c.memory, opt.memory_budget)});
    }
    if (hand_on) {
      json e = error_json({"", hand_on});
      e["needs_full_engine"] = true;
      return e;
    }
#ifdef _OPENMP
    threads.emplace(analysis_work(c));
#endif
    c.x = draw_input(cfg, 0);
    c.ev = std::make_unique<Evaluator>(c.model, c.x);
    for (size_t i = 0; i < c.model.params.size(); ++i)
      if (is_bias_like(c.model.params[i].role)) c.bias_params.push_back(static_cast<int>(i));
    // A split analysis (analyze.hpp): this engine's part of the biases.
    Split split;
    if (const char* e = take_part(c, split)) return error_json({"", e});

    // "setup": everything before the analyses (building the weights, the work and memory checks,
    // the input and its base forwards), so that the laps add up to "total".
    json timing = json::object();
    double mark = 0;
    auto lap = [&](const char* what) {
      const double now = ms();
      timing[what] = now - mark;
      mark = now;
    };
    lap("setup");
#ifdef _OPENMP
    timing["threads"] = omp_get_max_threads();
#endif
    Results r;
    r.biases = analyse_biases(c);
    c.solver->release_tails();
    lap("biases");
    if (split.part > 0) return part_json(c, r, split, std::move(timing), t0);  // its sweep too
    if (opt.invariances) r.invariances = analyse_invariances(c);
    lap("invariances");
    if (opt.sweep) r.sweep = analyse_sweep(c);
    lap("sweep");
    // The folds come last, on the network: after the report's work figures, the model gives the
    // network its values back, and the full engine frees the traces and the float32 copy, which
    // the folds do not use (memory.hpp).
    for (const ModelParam& p : c.model.params)
      if (is_bias_like(p.role)) c.structural_estimate += structural_flops(c.model, p, c.solver->injective_cut(p.op));
    c.forward_work = forward_flops(c.model);
    return_values(c.model);
    release_for_folds(c);
    if (opt.folds) {
      r.folds = analyse_folds(c);
      r.minimal = minimal_model(c);
    }
    lap("folds");
    json per_bias = json::object();
    for (const BiasResult& b : r.biases) per_bias[b.param] = b.solve_ms;
    timing["structure_per_bias"] = per_bias;
    timing["total"] = ms();
    json report = report_json(c, r, std::move(timing));
    if (split.parts > 1) add_pending(c, split, report);
    if (opt.progress) opt.progress("done", 1.0);
    return report;
  } catch (const Cancelled&) {
    return error_json({"", "cancelled"});
  } catch (const std::bad_alloc&) {
    return error_json({"", "out of memory: the analysis needs more than this engine has"});
  } catch (const std::exception& e) {
    return error_json({"", std::string("internal error: ") + e.what()});
  }
}

BIASLAB_COLD json analyze_text(const std::string& text, const AnalyzeOptions& opt) {
  try {
    const Result<ExperimentConfig> cfg = parse_config_text(text);
    if (!cfg) return error_json(cfg.error());
    return analyze(*cfg, opt);
  } catch (const std::exception& e) {
    return error_json({"", std::string("internal error: ") + e.what()});
  }
}

}  // namespace biaslab
