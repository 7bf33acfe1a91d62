#include "core/measure.hpp"

#include <algorithm>
#include <cmath>

namespace biaslab {

Eval combine_eval(DType dtype, const MatT<float>& y32, const Mat& y64) {
  Eval e;
  e.dtype = dtype;
  const Mat y32d = y32.cast<double>();
  e.finite = y32d.allFinite() && y64.allFinite();
  const double diff = e.finite ? (y32d - y64).cwiseAbs().maxCoeff() : 0.0;
  // Never below one unit roundoff of the largest output: the last rounding of the result
  // alone can move it that far, which a lucky float32/float64 pair may not show.
  const double u = dtype == DType::float32 ? 0x1.0p-24 : 0x1.0p-53;
  const double ymax = e.finite ? y64.cwiseAbs().maxCoeff() : 0.0;
  if (dtype == DType::float32) {
    e.y = y32d;
    e.y_other = y64;
    e.rounding = std::max(diff, u * ymax);
    e.rounding_other = std::max(diff * kRoundoffRatio, 0x1.0p-53 * ymax);
  } else {
    e.y = y64;
    e.y_other = y32d;
    e.rounding = std::max(diff * kRoundoffRatio, u * ymax);
    e.rounding_other = std::max(diff, 0x1.0p-24 * ymax);
  }
  return e;
}

Evaluator::Evaluator(const Model& m, const Mat& x) : m_(m), x_(x) {
  wf_ = cast_weights<float>(m);
  xf_ = x.cast<float>();
  if (m.dtype == DType::float32) {
    // The float64 reference runs on exactly the float32 model's values.
    wd_.reserve(wf_.size());
    for (const auto& w : wf_) wd_.push_back(w.cast<double>());
    xd_ = xf_.cast<double>();
  } else {
    wd_ = cast_weights<double>(m);
    xd_ = x;
  }
  ++runs_;
  const MatT<float> y32 = forward_recording<float>(m_, wf_, xf_, rec32_);
  const Mat y64 = forward_recording<double>(m_, wd_, xd_, rec64_);
  base_ = combine_eval(m_.dtype, y32, y64);
}

Eval Evaluator::run(int param, const Mat* value) const {
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
  const MatT<float> y32 = forward_from<float>(m_, wf_, rec32_, start, of);
  const Mat y64 = forward_from<double>(m_, wd_, rec64_, start, od);
  return combine_eval(m_.dtype, y32, y64);
}

Eval Evaluator::run_model(const Model& other, const Mat& x) {
  return Evaluator(other, x).base();
}

Delta Evaluator::compare(const Eval& a, const Eval& b) {
  Delta d;
  d.finite = a.finite && b.finite && a.y.rows() == b.y.rows() && a.y.cols() == b.y.cols();
  d.floor = kFloorFactor * (a.rounding + b.rounding);
  if (!d.finite) return d;
  const Mat diff = b.y - a.y;
  d.max_abs = diff.cwiseAbs().maxCoeff();
  if (a.dtype == DType::float64 && b.dtype == DType::float64 && a.y_other.size() == b.y_other.size()) {
    const double d32 = (b.y_other - a.y_other).cwiseAbs().maxCoeff();
    if (d32 <= kFloorFactor * (a.rounding_other + b.rounding_other))  // float32 saw only noise
      d.floor = std::max(d.floor, kFloorFactor * kRoundoffRatio * d32);
  }
  d.mean_abs = diff.cwiseAbs().mean();
  const double ny = a.y.norm();
  d.rel = ny > 0 ? diff.norm() / ny : diff.norm();
  return d;
}

}  // namespace biaslab
