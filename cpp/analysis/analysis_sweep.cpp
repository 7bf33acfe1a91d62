// The sweep: each bias's change of the output against the size of its move.
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <vector>

#include "analysis/analysis.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif
#include "core/cold.hpp"
#include "core/rng.hpp"

namespace biaslab::analysis {

BIASLAB_COLD Sweep analyse_sweep(Context& c) {
  constexpr double none = std::numeric_limits<double>::quiet_NaN();
  Sweep out;
  for (int e = -8; e <= 2; ++e) out.sizes.push_back(std::pow(10.0, e));
  const double far = kSweepFar * kFloorFactor * 2 * c.ev->base().rounding;
  for (size_t bi = 0; bi < c.bias_params.size(); ++bi) {
    const int pi = c.bias_params[bi];
    const ModelParam& p = c.model.params[pi];
    c.step("sweep " + p.name, 0.67 + 0.2 * bi / c.bias_params.size());
    const Structure& st = c.structures[bi];
    // The points in the order `run` takes them: every size along the bias's direction, then, for
    // a partly redundant bias, along a direction of its redundant part (drawn here as below,
    // from the same stream). The run at size 1 is reused where it was made already.
    const bool redundant = st.determined && st.redundant_dim > 0 && st.redundant_dim < st.size;
    Vec un_pre;  // (the redundant direction)
    if (redundant) {
      Rng rng(c.cfg.seed, "null." + p.name);
      Vec g(st.redundant_dim);
      for (int i = 0; i < g.size(); ++i) g(i) = rng.normal();
      un_pre = st.null_basis * g;
      un_pre *= std::sqrt(double(st.size)) / un_pre.norm();
    }
    const int k = static_cast<int>(out.sizes.size());
    const int count = redundant ? 2 * k : k;
    std::vector<std::optional<Eval>> pre(static_cast<size_t>(count));
    std::vector<double> pre_moved(static_cast<size_t>(count), 0.0);
    std::vector<char> made(static_cast<size_t>(count), 0);
    // First as one forward pass per precision (stack_points), where the points' outputs (two
    // precisions each, all held until `run` takes them) stay under 256 MB.
    const double bytes = 2.0 * count * double(c.ev->base().y.size()) * sizeof(double);
    if (bytes <= 256.0 * 1024 * 1024) stack_points(c, bi, out.sizes, un_pre, far, pre, pre_moved, made);
#ifdef _OPENMP
    // Else, natively, a bias's points run side by side, each on one thread (Eigen does not split
    // a product inside a parallel region), so each rounds as it would alone; `run` takes them in
    // order (`at`). On one thread, nothing here: `run` makes them one after the other.
    const bool stacked = std::find(made.begin(), made.end(), 1) != made.end();
    const int side = stacked || omp_get_max_threads() < 2 || bytes > 256.0 * 1024 * 1024 ? 0 : count;
    std::exception_ptr failed;  // (an exception must not leave the parallel region)
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < side; ++i) {
      if (out.sizes[static_cast<size_t>(i % k)] == 1.0 && (i < k || c.null_runs[bi])) continue;  // the unit run
      try {
        const Mat v = p.value + Mat((i < k ? c.directions[bi] : un_pre) * out.sizes[static_cast<size_t>(i % k)]);
        pre[static_cast<size_t>(i)] = c.ev->run_near(pi, &v, far, &pre_moved[static_cast<size_t>(i)]);
        made[static_cast<size_t>(i)] = 1;
      } catch (...) {
#pragma omp critical(biaslab_sweep)
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
#endif
    size_t at = 0;
    // `unit`: the run already made at size 1 in this direction (the same values bit for bit).
    // A point whose change is over kSweepFar times the unperturbed model's own floor has no
    // floor measured: its companion run in the other precision is skipped.
    auto run = [&](const Vec& u, const Eval* unit, std::vector<double>& delta, std::vector<double>& floor) {
      for (double sz : out.sizes) {
        const size_t here = at++;
        std::optional<Eval> e;
        double moved = 0;
        if (sz == 1.0 && unit) {
          e = *unit;
        } else if (made[here]) {
          e = std::move(pre[here]);
          moved = pre_moved[here];
        } else {
          const Mat v = p.value + Mat(u * sz);
          e = c.ev->run_near(pi, &v, far, &moved);
        }
        if (!e) {
          delta.push_back(moved);
          floor.push_back(none);
          continue;
        }
        const Delta d = Evaluator::compare(c.ev->base(), *e);
        delta.push_back(d.finite ? d.max_abs : none);
        floor.push_back(d.finite && d.max_abs > far ? none : d.floor);  // the same rule for reused runs
      }
    };
    SweepSeries s;
    s.param = p.name;
    run(c.directions[bi], &c.unit_runs[bi], s.delta, s.floor);
    if (redundant) {
      s.has_redundant = true;
      run(un_pre, c.null_runs[bi] ? &*c.null_runs[bi] : nullptr, s.delta_redundant, s.floor_redundant);
    }
    out.series.push_back(std::move(s));
  }
  return out;
}

}  // namespace biaslab::analysis
