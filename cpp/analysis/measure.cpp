#include "analysis/measure.hpp"
#include "core/cold.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace biaslab {

Eval combine_eval(DType dtype, const MatT<float>& y32, const Mat& y64) {
  Eval e;
  e.dtype = dtype;
  // One pass: finiteness, max |y32 - y64| and max |y64|.
  const float* a = y32.data();
  const double* b = y64.data();
  double diff = 0, ymax = 0;
  bool finite = true;
  for (Eigen::Index i = 0, n = y64.size(); i < n; ++i) {
    const double x = a[i], y = b[i];
    finite = finite && std::isfinite(x) && std::isfinite(y);
    diff = std::max(diff, std::abs(x - y));
    ymax = std::max(ymax, std::abs(y));
  }
  e.finite = finite;
  if (!finite) diff = ymax = 0;
  // Never below one unit roundoff of the largest output: the last rounding of the result
  // alone can move it that far, which a lucky float32/float64 pair may not show.
  const double u = dtype == DType::float32 ? 0x1.0p-24 : 0x1.0p-53;
  if (dtype == DType::float32) {
    e.y = y32.cast<double>();
    e.y_other = y64;
    e.rounding = std::max(diff, u * ymax);
    e.rounding_other = std::max(diff * kRoundoffRatio, 0x1.0p-53 * ymax);
  } else {
    e.y = y64;
    e.y_other = y32.cast<double>();
    e.rounding = std::max(diff * kRoundoffRatio, u * ymax);
    e.rounding_other = std::max(diff, 0x1.0p-24 * ymax);
  }
  return e;
}

namespace {
// The float64 run's weights: the model's own, or for a float32 model exactly its float32 values:
// the model's own where they are float32 numbers (build_network; run_model where
// kFoldsLendValues is false), else a copy rounded
// to them. (Built once, in the member's initialiser: the first-load engine counts the bytes.)
[[gnu::noinline]] BIASLAB_COLD Weights<double> reference_weights(const Model& m, const Weights<float>& wf) {
  bool exact = true;
  for (size_t i = 0; i < m.params.size() && exact && m.dtype == DType::float32; ++i) exact = holds_floats(m.params[i].value);
  if (exact) return model_weights(m);
  std::vector<Mat> wd(wf.size());
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = wf[i].cast<double>();
  return Weights<double>(std::move(wd));
}
}  // namespace

BIASLAB_COLD Evaluator::Evaluator(const Model& m, const Mat& x)
    : m_(m), x_(x), wf_(cast_weights<float>(m)), wd_(reference_weights(m, wf_)) {
  xf_ = x.cast<float>();
  xd_ = m.dtype == DType::float32 ? Mat(xf_.cast<double>()) : x;
  ++runs_;
  const MatT<float> y32 = forward_recording<float>(m_, wf_, xf_, rec32_);
  const Mat y64 = forward_recording<double>(m_, wd_, xd_, rec64_);
  base_ = combine_eval(m_.dtype, y32, y64);
}

Eval Evaluator::run(int param, const Mat* value) const {
  double moved = 0;
  return *run_near(param, value, std::numeric_limits<double>::infinity(), &moved);
}

std::optional<Eval> Evaluator::run_near(int param, const Mat* value, double far, double* moved) const {
  MatT<float> vf;
  Mat vd;
  Override<float> of;
  Override<double> od;
  if (param >= 0 && value) {
    vf = value->cast<float>();
    vd = m_.dtype == DType::float32 ? Mat(vf.cast<double>()) : *value;
    of = {param, &vf};
    od = {param, &vd};
  }
  ++runs_;
  // Only ops from the parameter's own op onward see the change.
  const int start = param >= 0 ? m_.params[param].op : 0;
  // The config's precision first.
  MatT<float> y32;
  Mat y64;
  double d = 0;
  bool finite = true;
  if (m_.dtype == DType::float32) {
    y32 = forward_from<float>(m_, wf_, rec32_, start, of);
    finite = y32.allFinite();
    if (finite) d = (y32.cast<double>() - base_.y).cwiseAbs().maxCoeff();
  } else {
    y64 = forward_from<double>(m_, wd_, rec64_, start, od);
    finite = y64.allFinite();
    if (finite) d = (y64 - base_.y).cwiseAbs().maxCoeff();
  }
  *moved = finite ? d : std::numeric_limits<double>::infinity();
  if (finite && d > far) return std::nullopt;
  if (m_.dtype == DType::float32) y64 = forward_from<double>(m_, wd_, rec64_, start, od);
  else y32 = forward_from<float>(m_, wf_, rec32_, start, of);
  return combine_eval(m_.dtype, y32, y64);
}

BIASLAB_COLD Eval Evaluator::run_model(Model&& other, const Mat& x) {
  if (other.dtype == DType::float32)  // (in place: a wide model's copy rounded would be its size again)
    for (ModelParam& p : other.params) round_to_float(p.value);
  if constexpr (kFoldsLendValues) {
    // Its values are now numbers of the config's precision, so the float64 run reads them as
    // they are (an Evaluator would scan a float32 model's values to learn that), and neither run
    // is recorded: none restarts part-way.
    const MatT<float> xf = x.cast<float>();
    const Mat xd = other.dtype == DType::float32 ? Mat(xf.cast<double>()) : x;
    const MatT<float> y32 = forward<float>(other, cast_weights<float>(other), xf);
    return combine_eval(other.dtype, y32, forward<double>(other, model_weights(other), xd));
  } else {
    return Evaluator(other, x).base();
  }
}

Delta Evaluator::compare(const Eval& a, const Eval& b) {
  Delta d;
  d.finite = a.finite && b.finite && a.y.rows() == b.y.rows() && a.y.cols() == b.y.cols();
  d.floor = kFloorFactor * (a.rounding + b.rounding);
  if (!d.finite) return d;
  // One pass over the outputs: max, mean and 2-norm of the difference, and the norm of a.
  double max_abs = 0, sum_abs = 0, sum_sq = 0, ny_sq = 0;
  const double* pa = a.y.data();
  const double* pb = b.y.data();
  const Eigen::Index n = a.y.size();
  for (Eigen::Index i = 0; i < n; ++i) {
    const double t = pb[i] - pa[i], at = std::abs(t);
    max_abs = std::max(max_abs, at);
    sum_abs += at;
    sum_sq += t * t;
    ny_sq += pa[i] * pa[i];
  }
  d.max_abs = max_abs;
  if (a.dtype == DType::float64 && b.dtype == DType::float64 && a.y_other.size() == b.y_other.size()) {
    const double d32 = (b.y_other - a.y_other).cwiseAbs().maxCoeff();
    if (d32 <= kFloorFactor * (a.rounding_other + b.rounding_other))  // float32 saw only noise
      d.floor = std::max(d.floor, kFloorFactor * kRoundoffRatio * d32);
  }
  d.mean_abs = n > 0 ? sum_abs / double(n) : 0.0;
  const double ny = std::sqrt(ny_sq), nd = std::sqrt(sum_sq);
  d.rel = ny > 0 ? nd / ny : nd;
  return d;
}

}  // namespace biaslab
