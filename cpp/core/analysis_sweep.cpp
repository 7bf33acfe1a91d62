// The sweep: each bias's change of the output against the size of its move.
#include <cmath>

#include "core/analysis.hpp"
#include "core/cold.hpp"
#include "core/rng.hpp"

namespace biaslab::analysis {
namespace {

// Sweep points beyond this multiple of the unperturbed floor skip the floor's measurement (the
// report's noise_floor_note says the same number).
constexpr double kSweepFar = 1e6;

}  // namespace

BIASLAB_COLD json analyse_sweep(Context& c) {
  json sizes = json::array();
  std::vector<double> s;
  for (int e = -8; e <= 2; ++e) {
    s.push_back(std::pow(10.0, e));
    sizes.push_back(s.back());
  }
  json series = json::array();
  const double far = kSweepFar * kFloorFactor * 2 * c.ev->base().rounding;
  for (size_t bi = 0; bi < c.bias_params.size(); ++bi) {
    const int pi = c.bias_params[bi];
    const ModelParam& p = c.model.params[pi];
    c.step("sweep " + p.name, 0.85 + 0.15 * bi / c.bias_params.size());
    const Structure& st = c.structures[bi];
    // `unit`: the run already made at size 1 in this direction (the same values bit for bit).
    // A point whose change is over kSweepFar times the unperturbed model's own floor has no
    // floor measured (null): its companion run in the other precision is skipped.
    auto run = [&](const Vec& u, const Eval* unit) {
      json delta = json::array(), floor = json::array();
      for (double sz : s) {
        std::optional<Eval> e;
        double moved = 0;
        if (sz == 1.0 && unit) {
          e = *unit;
        } else {
          const Mat v = p.value + Mat(u * sz);
          e = c.ev->run_near(pi, &v, far, &moved);
        }
        if (!e) {
          delta.push_back(num(moved));
          floor.push_back(nullptr);
          continue;
        }
        const Delta d = Evaluator::compare(c.ev->base(), *e);
        delta.push_back(d.finite ? num(d.max_abs) : json(nullptr));
        floor.push_back(d.finite && d.max_abs > far ? json(nullptr) : num(d.floor));  // the same rule for reused runs
      }
      return std::make_pair(delta, floor);
    };
    auto [delta, floor] = run(c.directions[bi], &c.unit_runs[bi]);
    json row = {{"param", p.name}, {"delta", delta}, {"noise_floor", floor}};
    if (st.determined && st.redundant_dim > 0 && st.redundant_dim < st.size) {
      Rng rng(c.cfg.seed, "null." + p.name);
      Vec g(st.redundant_dim);
      for (int i = 0; i < g.size(); ++i) g(i) = rng.normal();
      Vec un = st.null_basis * g;
      un *= std::sqrt(double(st.size)) / un.norm();
      auto [dr, fr] = run(un, c.null_runs[bi] ? &*c.null_runs[bi] : nullptr);
      row["delta_redundant"] = dr;
      row["noise_floor_redundant"] = fr;
    }
    series.push_back(row);
  }
  return {{"sizes", sizes},
          {"direction", "random, unit RMS per entry, scaled by size"},
          {"noise_floor_note", "null where the change exceeds 1e6 x the unperturbed model's floor: "
                               "not measured there (it cannot decide anything)"},
          {"series", series}};
}

}  // namespace biaslab::analysis
