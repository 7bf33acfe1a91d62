// The analyses behind analyze() (analyze.hpp), one file each: the biases (analysis_biases.cpp),
// the folds and the minimal model (analysis_folds.cpp), the invariance probes
// (analysis_invariances.cpp) and the sweep (analysis_sweep.cpp). They share one Context: the
// compiled model, the evaluator of the analysed input, the structural solver, and what the bias
// analysis leaves for the others (structures, directions and the runs already made). Each
// returns typed results; report.cpp alone turns them into the report's JSON. Internal to the
// core.
#pragma once

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "folds/folds.hpp"
#include "analysis/measure.hpp"
#include "analysis/memory.hpp"
#include "model/model.hpp"
#include "analysis/structure.hpp"

namespace biaslab::analysis {

using json = Json;

// Thrown by Context::step when the caller cancels; analyze() turns it into an error report.
struct Cancelled {};

// A JSON number, or null when not finite (JSON has no NaN).
inline json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A random direction with unit RMS per entry (so "size s" means entries of about s).
Vec unit_rms_direction(std::uint64_t seed, const std::string& key, int n);

// The op a bias's tangent meets first, skipping residual ends and position tables (both add to
// it and pass it on).
struct Next {
  const Op* op = nullptr;
  bool through_residual = false;
};
Next next_op(const Model& m, int op_index);

// A parameter's name inside its layer: "layers.0.k_proj.bias" -> "k_proj.bias", "layers.2.sinks"
// -> "sinks".
std::string local_name(const Model& m, const ModelParam& p);

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
  MemoryNeed memory;  // the bound on what the analysis holds at once (memory.hpp)
  // The report's work figures, taken before the folds (return_values gives the model's values
  // back to the network).
  double structural_estimate = 0, forward_work = 0;
  std::vector<int> bias_params;
  std::vector<Structure> structures;
  std::vector<Vec> directions;  // per bias: the random perturbation direction (unit RMS)
  // Per bias: the forward perturbed by that direction, and by +the null-space probe (when one
  // was made). The sweep's size-1 points are these very runs.
  std::vector<Eval> unit_runs;
  std::vector<std::optional<Eval>> null_runs;

  void step(const std::string& label, double f) {
    if (opt.cancelled && opt.cancelled()) throw Cancelled{};
    if (opt.progress) opt.progress(label, f);
  }
};

// One bias: its measured verdict beside its structure (c.structures[i], same order). The
// report's row is built from it in report.cpp.
struct BiasResult {
  std::string param;
  int size = 0;
  std::string verdict;                  // redundant | partly_redundant | effective | undetermined
  Delta full;                           // the random move of RMS 1 per entry
  std::optional<Delta> redundant_part;  // the move inside the null space, when one was made
  std::string note;                     // why the verdict disagrees with the structure, if it does
  std::string why, directions;          // the explanation and the named null subspace
  std::string jacobian_at;              // where the structure took the Jacobian
  double solve_ms = 0;                  // wall time of the structural solve (timing only)
};

// One fold candidate applied to a copy and measured.
struct FoldResult {
  FoldCandidate candidate;
  FoldApplied applied;
  Delta delta;
  long params_removed = 0;
  bool exact() const { return delta.finite && !delta.above_floor(); }
};

// The smallest equivalent model: the folds of the minimal set, applied until none removes a
// parameter, and the folded model measured.
struct MinimalModel {
  struct Step {
    std::string rule;
    std::vector<std::string> layers;
    long params_removed = 0;
  };
  long params_before = 0, params_after = 0;
  std::vector<Step> steps;
  Delta delta;
  ExperimentConfig config;
};

// One invariance probe on one op (or the whole model) and its actual input.
struct Probe {
  std::string probe, layer, transform, expected, note;
  Delta delta;
};

// The change of the output against the size of each bias's move; NaN where there is no number
// (a non-finite output, or a floor not measured beyond kSweepFar x the model's own floor).
struct SweepSeries {
  std::string param;
  std::vector<double> delta, floor;
  bool has_redundant = false;  // the same along the null space (0 < k < n)
  std::vector<double> delta_redundant, floor_redundant;
};
struct Sweep {
  std::vector<double> sizes;
  std::vector<SweepSeries> series;
};
// Sweep points beyond this multiple of the unperturbed floor skip the floor's measurement (the
// report's noise_floor_note says the same number).
constexpr double kSweepFar = 1e6;

// Per bias, in bias order. Leaves c.structures, c.directions, c.unit_runs and c.null_runs for
// the sweep.
std::vector<BiasResult> analyse_biases(Context& c);
std::vector<FoldResult> analyse_folds(Context& c);
MinimalModel minimal_model(Context& c);
std::vector<Probe> analyse_invariances(Context& c);
Sweep analyse_sweep(Context& c);
// The sweep's points of bias `bi` (sizes `sizes` along c.directions[bi], then along `redundant`
// when it is not empty), run ahead as one forward pass per precision (forward_from_stacked) where
// they can be: point i in that order, unless it is the run at size 1 made already, gets pre[i],
// moved[i] (as run_near's) and made[i] = 1. Nothing in the page's first-load engine
// (analysis/stacked_runs.cpp).
void stack_points(const Context& c, size_t bi, const std::vector<double>& sizes, const Vec& redundant, double far,
                  std::vector<std::optional<Eval>>& pre, std::vector<double>& moved, std::vector<char>& made);

// The structural analysis holds one Jacobian per input: size x (batch*tokens) x width entries
// at most (fewer when it is sparse). analyze() refuses up front what would not fit, naming the
// layer.
constexpr double kMaxJacobianEntries = StructureOptions{}.max_jacobian_entries;
// Estimated floating-point work of the structural analysis, over a typical 3 inputs per bias,
// each bias counted at most at its own budget (StructureOptions::max_flops: it stops there and
// says so in its row); refused up front above this.
constexpr double kMaxStructuralFlops = 1e12;  // about 1 min natively on two threads, 3 in wasm
// `cut`: where the structure takes the bias's Jacobian (StructureSolver::injective_cut; -1:
// computed again).
double structural_flops(const Model& m, const ModelParam& p, int cut = -1);

// Everything the analyses found; the parts the options turned off are empty.
struct Results {
  std::vector<BiasResult> biases;
  std::vector<FoldResult> folds;
  std::optional<MinimalModel> minimal;
  std::optional<std::vector<Probe>> invariances;
  std::optional<Sweep> sweep;
};

// A split analysis (AnalyzeOptions::split_over; analysis/parts.cpp, nothing in the page's
// first-load engine). take_part decides the split (AnalyzeOptions) and keeps this engine's part
// of c.bias_params, the same groups in every engine; part_json runs a helper's sweep and answers
// its biases' rows, sweep series and work (timing: the laps since t0 so far); add_pending adds to part 0's report what merge_parts needs.
struct Split {
  int part = 0, parts = 1;
  long setup_runs = 0;  // forward passes before the biases
};
const char* take_part(Context& c, Split& split);  // an error's message, or nullptr
// The estimated work of the whole analysis: every bias's structure and sweep, whichever part
// runs it, in flops weighed by their kind's speed in the page's engine (parts.cpp: a tangent's
// flop 1.7, a sweep's 0.8, a Gram matrix's 1), as the split's plan weighs its parts; the
// thresholds below read it too.
double analysis_work(const Context& c);
// Natively, an analysis estimated under this much work runs on one thread (analyze.cpp): in a
// fresh process OpenMP's second thread costs a few milliseconds (its start, its first wake-ups),
// more than such an analysis gains from it (README, "Threads").
constexpr double kThreadsMinWork = 1e8;
json part_json(Context& c, Results& r, const Split& split, json timing, std::chrono::steady_clock::time_point t0);
void add_pending(const Context& c, const Split& split, json& report);

// The report (report.cpp, the only place that writes its JSON), and its parts.
json report_json(const Context& c, const Results& r, json timing_ms);
// The bias rows of `biases` (c.structures in the same order), before the folds annotate them.
json bias_rows_json(const Context& c, const std::vector<BiasResult>& biases);
// absorbed_by, absorbed_into and folds of each bias row, from the report's fold rows.
void annotate_bias_rows(json& rows, const json& fold_rows);
// The report's summary counts of verdicts and structural.max_inputs_per_bias, from its bias rows.
void count_bias_rows(const json& rows, json& report);
json fold_rows_json(const std::vector<FoldResult>& folds);
json minimal_model_json(const MinimalModel& mm);
json invariances_json(const std::vector<Probe>& probes);
json sweep_json(const Sweep& sweep);
json error_json(const Error& e);

}  // namespace biaslab::analysis
