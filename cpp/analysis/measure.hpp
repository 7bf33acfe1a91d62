// Measuring output changes against a measured noise floor.
//
// Every forward runs in the config's dtype AND in the other precision on the same (rounded)
// values. For a float32 config the rounding error of an output is measured directly as
// max |y32 - y64|. For a float64 config it is the same float32-vs-float64 difference scaled by
// the ratio of unit roundoffs (2^-52 / 2^-23): the network's measured sensitivity to rounding,
// at float64's precision. A difference between two forwards is real only above
// noise_floor = 8 * (rounding of the first + rounding of the second); never a fixed tolerance.
// For float64 the floor is also at least 8 * 2^-29 * the same difference taken in float32: when
// nothing real changed, that difference is float32's rounding noise of this very comparison,
// conditioning included (near-constant sets, cancellation), which the per-output estimates miss;
// when something did change, the term is 1.5e-8 of the change and decides nothing.
// (2 would bound |e1 - e2| by |e1| + |e2| if the roundings were known exactly; the other factor
// of 4 covers the float64 estimate, which is a scaled measurement, not the error itself.)
#pragma once

#include <atomic>
#include <optional>

#include "model/forward.hpp"

namespace biaslab {

// How a fold's output is measured, one decision for its three places: natively the folded
// network lends the compiled model its values (analysis_folds.cpp) and run_model forwards that
// model in both precisions without an Evaluator, so beside the fold's copy sits only its float32
// copy; every wasm engine compiles a copy and runs an Evaluator, because the core is compiled
// once for them all and the first-load engine cannot afford the lighter path's code. memory_need
// (memory.cpp) counts whichever path this selects. It depends on the target alone, never on a
// define of one wasm module (BIASLAB_LEAN_ENGINE): memory.cpp is compiled for each module, the
// other two files once in the core, and the three must agree.
#ifdef __EMSCRIPTEN__
inline constexpr bool kFoldsLendValues = false;
#else
inline constexpr bool kFoldsLendValues = true;
#endif

struct Eval {
  Mat y;            // output in the config's dtype, widened to double
  Mat y_other;      // the same output in the other precision
  DType dtype = DType::float64;
  double rounding;  // measured max abs rounding error of y
  double rounding_other = 0;  // ... and of y_other
  bool finite;
};

struct Delta {
  double max_abs = 0, mean_abs = 0, rel = 0, floor = 0;
  bool finite = true;
  bool above_floor() const { return !finite || max_abs > floor; }
};

class Evaluator {
 public:
  Evaluator(const Model& m, const Mat& x);
  // Forward with parameter `param` (index into m.params, -1: none) replaced by `value`.
  Eval run(int param = -1, const Mat* value = nullptr) const;
  // The same, for points where only large changes are expected (the sweep): the config's
  // precision runs first, and the other precision, which serves only the noise floor, runs
  // only if the output moved by at most `far` from the base output. Beyond that no plausible
  // floor decides anything: returns nullopt and *moved = max |y - base y|. A non-finite output
  // is always returned whole (its Eval says finite = false; *moved is infinite).
  std::optional<Eval> run_near(int param, const Mat* value, double far, double* moved) const;
  // Forward of another model (a folded one) on the same input.
  static Eval run_model(Model&& other, const Mat& x);  // (rounds a float32 model in place)
  static Delta compare(const Eval& a, const Eval& b);
  const Eval& base() const { return base_; }
  const Model& model() const { return m_; }
  const Mat& input() const { return x_; }
  const Weights<float>& weights32() const { return wf_; }
  const Weights<double>& weights64() const { return wd_; }
  const Recording<float>& recording32() const { return rec32_; }
  const Recording<double>& recording64() const { return rec64_; }
  // Forward passes made so far (each run is one float32 and one float64 pass).
  long runs() const { return runs_; }
  void count_runs(long n) const { runs_ += n; }
  // Frees the float32 copy of the parameters (and the view of the model's): base() and runs()
  // stay, run() may not be called again.
  void release_weights() {
    wf_ = Weights<float>();
    wd_ = Weights<double>();
  }

 private:
  const Model& m_;
  Mat x_;
  Weights<float> wf_;
  Weights<double> wd_;
  MatT<float> xf_;
  Mat xd_;
  Eval base_;
  Recording<float> rec32_;  // the base forward, to restart perturbed ones part-way
  Recording<double> rec64_;
  mutable std::atomic<long> runs_{0};  // (the sweep runs points side by side)
};

// Combines one computation done in float32 and in float64 into an Eval for `dtype`.
Eval combine_eval(DType dtype, const MatT<float>& y32, const Mat& y64);

// run_near for several values of one parameter (the sweep's points), their forward passes
// stacked (forward_from_stacked) in groups that keep a stacked tangent of the widest op under
// 32 MiB; moved[k] as run_near's. Empty where they cannot be stacked (the caller then runs each).
// Not in the page's first-load engine (analysis/stacked_runs.cpp; analysis::stack_points calls it).
std::vector<std::optional<Eval>> run_near_stacked(const Evaluator& ev, int param, const std::vector<Mat>& values,
                                                  double far, std::vector<double>& moved);

constexpr double kFloorFactor = 8.0;

// Unit roundoff ratio used to carry a float32-measured rounding to float64.
constexpr double kRoundoffRatio = 1.0 / 536870912.0;  // 2^-29 = 2^-52 / 2^-23

}  // namespace biaslab
