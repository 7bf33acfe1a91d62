// The folds: every candidate rewrite applied to a copy and measured; the smallest equivalent model.
#include <algorithm>

#include "core/analysis.hpp"
#include "core/cold.hpp"
#include "core/folds.hpp"

namespace biaslab::analysis {
namespace {

BIASLAB_COLD json fold_row(const FoldCandidate& cand, const FoldApplied& a, const Delta& d, long params_before,
              long params_after) {
  json moves = json::array();
  for (const auto& mv : a.moves) moves.push_back({{"from", mv.from}, {"to", mv.to.empty() ? json(nullptr) : json(mv.to)}});
  json row = {{"rule", cand.rule->id},
              {"title", cand.rule->title},
              {"formula", cand.rule->formula},
              {"where", a.layers},
              {"moves", moves},
              {"params_removed", params_before - params_after},
              {"dof_removed", a.dof_removed}};
  row.update(delta_json(d));
  row["exact"] = d.finite && !d.above_floor();
  return row;
}

}  // namespace

BIASLAB_COLD json analyse_folds(Context& c, json& biases) {
  json rows = json::array();
  const long before = count_parameters(c.net);
  const auto cands = find_folds(c.net);
  for (size_t i = 0; i < cands.size(); ++i) {
    c.step("fold " + std::string(cands[i].rule->id), 0.65 + 0.1 * i / std::max<size_t>(1, cands.size()));
    FoldApplied a;
    Network folded = apply_fold(c.net, cands[i], a);
    const Model fm = compile(folded);
    const Delta d = Evaluator::compare(c.ev->base(), Evaluator::run_model(fm, c.x));
    json row = fold_row(cands[i], a, d, before, count_parameters(folded));
    // absorbed_by: the parameter an exact fold moves a bias into (null when it is dropped).
    if (row["exact"].get<bool>())
      for (const auto& mv : a.moves)
        for (auto& b : biases)
          if (b["param"] == mv.from && mv.to != mv.from) {
            if (!mv.to.empty()) {
              if (b["absorbed_by"].is_null()) b["absorbed_by"] = mv.to;
              b["absorbed_into"].push_back(mv.to);
            }
            if (b["folds"].empty() || b["folds"].back() != cands[i].rule->id) b["folds"].push_back(cands[i].rule->id);
          }
    rows.push_back(row);
  }
  return rows;
}

BIASLAB_COLD json minimal_model(Context& c) {
  c.step("minimal model", 0.77);
  Network net = c.net;
  json applied = json::array();
  for (int iter = 0; iter < 256; ++iter) {
    bool changed = false;
    const long now = count_parameters(net);
    for (const auto& cand : find_folds(net)) {
      if (!cand.rule->in_minimal) continue;
      FoldApplied a;
      Network next = apply_fold(net, cand, a);
      if (count_parameters(next) >= now) continue;
      applied.push_back({{"rule", cand.rule->id}, {"where", a.layers}, {"params_removed", now - count_parameters(next)}});
      net = std::move(next);
      changed = true;
      break;
    }
    if (!changed) break;
  }
  const Model fm = compile(net);
  const Delta d = Evaluator::compare(c.ev->base(), Evaluator::run_model(fm, c.x));
  json out = {{"params_before", count_parameters(c.net)},
              {"params_after", count_parameters(net)},
              {"folds_applied", applied}};
  out.update(delta_json(d));
  out["exact"] = d.finite && !d.above_floor();
  out["config"] = config_to_json(net.config);
  return out;
}

}  // namespace biaslab::analysis
