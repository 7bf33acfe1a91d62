// The folds: every candidate rewrite applied to a copy and measured; the smallest equivalent model.
#include <algorithm>

#include "analysis/analysis.hpp"
#include "core/cold.hpp"
#include "folds/folds.hpp"

namespace biaslab::analysis {

namespace {
// A folded network's output on the analysis's input (`net` may be left without its values:
// kFoldsLendValues, measure.hpp).
Eval folded_output(Network& net, const Mat& x) {
  if constexpr (kFoldsLendValues) {
    // The network lends the model its values, for good (the network is thrown away): a block of
    // 44 M parameters holds them once more, not twice.
    Model m = compile(net, false);
    lend_values(m);
    return Evaluator::run_model(std::move(m), x);
  } else {
    return Evaluator::run_model(compile(net), x);
  }
}
}  // namespace

BIASLAB_COLD std::vector<FoldResult> analyse_folds(Context& c) {
  std::vector<FoldResult> out;
  const long before = count_parameters(c.net);
  const auto cands = find_folds(c.net);
  for (size_t i = 0; i < cands.size(); ++i) {
    c.step("fold " + std::string(cands[i].rule->id), 0.88 + 0.08 * i / std::max<size_t>(1, cands.size()));
    FoldResult r{cands[i], {}, {}, 0};
    Network folded = apply_fold(c.net, cands[i], r.applied);
    r.params_removed = before - count_parameters(folded);
    r.delta = Evaluator::compare(c.ev->base(), folded_output(folded, c.x));
    out.push_back(std::move(r));
  }
  return out;
}

BIASLAB_COLD MinimalModel minimal_model(Context& c) {
  c.step("minimal model", 0.97);
  Network net = c.net;
  MinimalModel mm;
  for (int iter = 0; iter < 256; ++iter) {
    bool changed = false;
    const long now = count_parameters(net);
    for (const auto& cand : find_folds(net)) {
      if (!cand.rule->in_minimal) continue;
      FoldApplied a;
      Network next = apply_fold(net, cand, a);
      if (!a.inexact.empty() || count_parameters(next) >= now) continue;
      mm.steps.push_back({cand.rule->id, a.layers, now - count_parameters(next)});
      net = std::move(next);
      changed = true;
      break;
    }
    if (!changed) break;
  }
  mm.params_before = count_parameters(c.net);
  mm.params_after = count_parameters(net);
  mm.config = net.config;
  mm.delta = Evaluator::compare(c.ev->base(), folded_output(net, c.x));
  return mm;
}

}  // namespace biaslab::analysis
