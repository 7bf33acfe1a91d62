// The analyses behind analyze() (analyze.hpp), one file each: the biases (analysis_biases.cpp),
// the folds and the minimal model (analysis_folds.cpp), the invariance probes
// (analysis_invariances.cpp) and the sweep (analysis_sweep.cpp). They share one Context: the
// compiled model, the evaluator of the analysed input, the structural solver, and what the bias
// analysis leaves for the others (structures, directions and the runs already made). Internal
// to the core; analyze.cpp builds the report from their results.
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/analyze.hpp"
#include "core/measure.hpp"
#include "core/model.hpp"
#include "core/structure.hpp"

namespace biaslab::analysis {

using json = Json;

// Thrown by Context::step when the caller cancels; analyze() turns it into an error report.
struct Cancelled {};

// A JSON number, or null when not finite (JSON has no NaN).
inline json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A random direction with unit RMS per entry (so "size s" means entries of about s).
Vec unit_rms_direction(std::uint64_t seed, const std::string& key, int n);

// The op a bias's tangent meets first, skipping residual ends (the add passes it on).
struct Next {
  const Op* op = nullptr;
  bool through_residual = false;
};
Next next_op(const Model& m, int op_index);

// The last two dotted parts of a name: "layers.0.k_proj.bias" -> "k_proj.bias".
std::string ends_with_local(const std::string& name);

// The verdict the structure alone predicts for k redundant directions of n.
inline const char* verdict_for(int k, int n) {
  return k == n ? "redundant" : k == 0 ? "effective" : "partly_redundant";
}

json delta_json(const Delta& d);

// "layers.0.body.1" -> "layers[0].body[1]" (the JSON path of a config layer).
std::string json_path(const std::string& dotted);

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

// Per bias: the row of the report (verdict, measured change, structure), in bias order. Leaves
// c.structures, c.directions, c.unit_runs and c.null_runs for the sweep.
json analyse_biases(Context& c);
// Every fold candidate applied and measured; an exact fold records in the rows of `biases` where
// it moves each bias (absorbed_by, absorbed_into, folds).
json analyse_folds(Context& c, json& biases);
// The smallest equivalent model: folds of the minimal set applied until none removes parameters.
json minimal_model(Context& c);
json analyse_invariances(Context& c);
json analyse_sweep(Context& c);

}  // namespace biaslab::analysis
