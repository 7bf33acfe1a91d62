// A sweep's points run as one forward pass per precision (forward_from_stacked). A product of a
// config's 32 rows runs at about half the speed per flop of one of 320 in the page's engine
// (Eigen's packing of the weights is paid once per product), so stacking the points halves most
// of the sweep there. Compiled for each wasm module on its own: the page's first-load engine,
// which analyses small configs, leaves it out.
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <new>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "analysis/analysis.hpp"

namespace biaslab {

#ifdef BIASLAB_LEAN_ENGINE
void analysis::stack_points(const analysis::Context&, size_t, const std::vector<double>&, const Vec&, double,
                            std::vector<std::optional<Eval>>&, std::vector<double>&, std::vector<char>&) {}
#else
namespace {

// Points per stack: a stacked tangent of the widest op from `start` on holds at most 4 M numbers.
size_t stack_size(const Model& m, int start, Eigen::Index rows) {
  long widest = m.out_features;
  for (size_t i = static_cast<size_t>(start); i < m.ops.size(); ++i)
    widest = std::max<long>(widest, std::max(m.ops[i].in, m.ops[i].out));
  return static_cast<size_t>(std::max<long>(1, (4L << 20) / std::max<long>(1, long(rows) * widest)));
}

// forward_from_stacked in groups of at most `group` values, natively one group per thread side
// by side (the ops between the products, a softmax or an activation, run on one core each); empty
// if it cannot stack them.
template <class S>
std::vector<MatT<S>> stacked(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start, int param,
                             const std::vector<MatT<S>>& values, size_t group) {
  size_t threads = 1;
#ifdef _OPENMP
  threads = static_cast<size_t>(std::max(1, omp_get_max_threads()));
#endif
  const size_t n = values.size(), groups = std::max((n + group - 1) / group, std::min(threads, n));
  std::vector<std::vector<MatT<S>>> parts(groups);
  std::exception_ptr failed;  // (an exception must not leave the parallel region)
#pragma omp parallel for schedule(static)
  for (size_t g = 0; g < groups; ++g) {
    try {
      std::vector<const MatT<S>*> part;
      for (size_t k = g * n / groups; k < (g + 1) * n / groups; ++k) part.push_back(&values[k]);
      parts[g] = forward_from_stacked<S>(m, w, rec, start, param, part);
    } catch (...) {
#pragma omp critical(biaslab_stacked)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  std::vector<MatT<S>> out;
  for (std::vector<MatT<S>>& part : parts) {
    if (part.empty()) return {};
    for (MatT<S>& v : part) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::vector<std::optional<Eval>> run_near_stacked(const Evaluator& ev, int param, const std::vector<Mat>& values,
                                                  double far, std::vector<double>& moved) {
  const Model& m = ev.model();
  const int start = m.params[static_cast<size_t>(param)].op;
  const Eigen::Index rows = ev.recording64().inputs[static_cast<size_t>(start)].rows();
  const size_t group = stack_size(m, start, rows);
  if (values.size() < 2 || group < 2) return {};
#ifdef _OPENMP
  // On several threads, where a point's products are small (under 32 MFLOP a pass), the points
  // run one per thread as before (analysis_sweep.cpp): there stacking them paid less than it
  // lost in balance (the GPT-2-block preset's sweep 23 -> 34 ms on two threads).
  double weights = 0;
  for (const ModelParam& q : m.params)
    if (q.op >= start && q.role == ParamRole::weight) weights += double(q.value.size());
  if (omp_get_max_threads() > 1 && 2.0 * double(rows) * weights < 32e6) return {};
#endif
  const bool f32 = m.dtype == DType::float32;
  // The values as run_near takes them: the float64 run of a float32 config sees the float32 value.
  std::vector<MatT<float>> vf(values.size());
  std::vector<Mat> vd(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    vf[k] = values[k].cast<float>();
    vd[k] = f32 ? Mat(vf[k].cast<double>()) : values[k];
  }
  // The config's precision first, every point.
  std::vector<MatT<float>> y32;
  std::vector<Mat> y64;
  if (f32) y32 = stacked<float>(m, ev.weights32(), ev.recording32(), start, param, vf, group);
  else y64 = stacked<double>(m, ev.weights64(), ev.recording64(), start, param, vd, group);
  if (y32.empty() && y64.empty()) return {};
  ev.count_runs(static_cast<long>(values.size()));
  moved.assign(values.size(), 0.0);
  std::vector<size_t> near;  // the points the other precision runs for; the others' outputs go
  for (size_t k = 0; k < values.size(); ++k) {
    const Mat y = f32 ? Mat(y32[k].cast<double>()) : y64[k];
    const bool finite = y.allFinite();
    const double d = finite ? (y - ev.base().y).cwiseAbs().maxCoeff() : 0.0;
    moved[k] = finite ? d : std::numeric_limits<double>::infinity();
    if (!finite || d <= far) near.push_back(k);
    else if (f32) y32[k] = MatT<float>();
    else y64[k] = Mat();
  }
  std::vector<std::optional<Eval>> out(values.size());
  if (near.empty()) return out;
  if (f32) {
    std::vector<Mat> vn;
    for (size_t k : near) vn.push_back(std::move(vd[k]));
    std::vector<Mat> yn = stacked<double>(m, ev.weights64(), ev.recording64(), start, param, vn, group);
    if (yn.size() != near.size()) return {};
    for (size_t j = 0; j < near.size(); ++j) {  // (each output freed once its Eval holds it)
      out[near[j]] = combine_eval(m.dtype, y32[near[j]], yn[j]);
      y32[near[j]] = MatT<float>();
      yn[j] = Mat();
    }
  } else {
    std::vector<MatT<float>> vn;
    for (size_t k : near) vn.push_back(std::move(vf[k]));
    std::vector<MatT<float>> yn = stacked<float>(m, ev.weights32(), ev.recording32(), start, param, vn, group);
    if (yn.size() != near.size()) return {};
    for (size_t j = 0; j < near.size(); ++j) {
      out[near[j]] = combine_eval(m.dtype, yn[j], y64[near[j]]);
      yn[j] = MatT<float>();
      y64[near[j]] = Mat();
    }
  }
  return out;
}

void analysis::stack_points(const analysis::Context& c, size_t bi, const std::vector<double>& sizes,
                            const Vec& redundant, double far, std::vector<std::optional<Eval>>& pre,
                            std::vector<double>& moved, std::vector<char>& made) {
  const int pi = c.bias_params[bi];
  const Mat& value = c.model.params[static_cast<size_t>(pi)].value;
  const size_t k = sizes.size(), count = redundant.size() > 0 ? 2 * k : k;
  std::vector<Mat> values;
  std::vector<size_t> which;
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i % k] == 1.0 && (i < k || c.null_runs[bi])) continue;  // the run at size 1, made already
    values.push_back(value + Mat((i < k ? c.directions[bi] : redundant) * sizes[i % k]));
    which.push_back(i);
  }
  std::vector<double> d;
  std::vector<std::optional<Eval>> runs;
  try {
    runs = run_near_stacked(*c.ev, pi, values, far, d);
  } catch (const std::bad_alloc&) {
    return;  // (out of memory for the stack: the sweep runs the points one by one)
  }
  for (size_t j = 0; j < runs.size(); ++j) {
    pre[which[j]] = std::move(runs[j]);
    moved[which[j]] = d[j];
    made[which[j]] = 1;
  }
}
#endif

}  // namespace biaslab
