// The sweep: each bias's change of the output against the size of its move.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "analysis/analysis.hpp"
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
    c.step("sweep " + p.name, 0.85 + 0.15 * bi / c.bias_params.size());
    const Structure& st = c.structures[bi];
    // `unit`: the run already made at size 1 in this direction (the same values bit for bit).
    // A point whose change is over kSweepFar times the unperturbed model's own floor has no
    // floor measured: its companion run in the other precision is skipped. The points of a bias
    // are independent runs: natively they run side by side (each on one thread, so each rounds
    // as it would alone), and are put in order after.
    struct Point {
      const Vec* u;
      const Eval* unit;
      double size;
      std::optional<Eval> e;
      double moved = 0;
    };
    std::vector<Point> points;
    auto plan = [&](const Vec& u, const Eval* unit) {
      for (double sz : out.sizes) points.push_back({&u, sz == 1.0 ? unit : nullptr, sz, std::nullopt, 0.0});
    };
    const bool redundant = st.determined && st.redundant_dim > 0 && st.redundant_dim < st.size;
    Vec un;
    if (redundant) {
      Rng rng(c.cfg.seed, "null." + p.name);
      Vec g(st.redundant_dim);
      for (int i = 0; i < g.size(); ++i) g(i) = rng.normal();
      un = st.null_basis * g;
      un *= std::sqrt(double(st.size)) / un.norm();
    }
    plan(c.directions[bi], &c.unit_runs[bi]);
    if (redundant) plan(un, c.null_runs[bi] ? &*c.null_runs[bi] : nullptr);
    const int count = static_cast<int>(points.size());
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic)
#endif
    for (int i = 0; i < count; ++i) {
      Point& pt = points[static_cast<size_t>(i)];
      if (pt.unit) {
        pt.e = *pt.unit;
      } else {
        const Mat v = p.value + Mat(*pt.u * pt.size);
        pt.e = c.ev->run_near(pi, &v, far, &pt.moved);
      }
    }
    SweepSeries s;
    s.param = p.name;
    s.has_redundant = redundant;
    for (int i = 0; i < count; ++i) {
      const Point& pt = points[static_cast<size_t>(i)];
      const bool second = i >= static_cast<int>(out.sizes.size());
      std::vector<double>& delta = second ? s.delta_redundant : s.delta;
      std::vector<double>& floor = second ? s.floor_redundant : s.floor;
      if (!pt.e) {
        delta.push_back(pt.moved);
        floor.push_back(none);
        continue;
      }
      const Delta d = Evaluator::compare(c.ev->base(), *pt.e);
      delta.push_back(d.finite ? d.max_abs : none);
      floor.push_back(d.finite && d.max_abs > far ? none : d.floor);  // the same rule for reused runs
    }
    out.series.push_back(std::move(s));
  }
  return out;
}

}  // namespace biaslab::analysis
