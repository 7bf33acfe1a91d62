// Merging the biases that close a parallel block's branches. Each is a constant added to the
// block's sum, x + sum_b (g_b(x) + c_b), so only their sum matters: one keeps c_1 + c_2 + ...,
// the others go. (Each bias alone is effective; together they hold as many degrees of freedom as
// one.) The one kept is the first that cannot be removed, only zeroed (glu's bias covers its
// other projections, a norm's shift is tied to its gain), else the first: then every other
// parameter goes, whatever the branches' order.
#include "core/cold.hpp"
#include "folds/rules.hpp"

namespace biaslab::folds_detail {

namespace {

// The closing biases of every branch of the parallel block at i, in branch order.
std::vector<Feeder> closing_biases(Seq& s, int i, const std::string& prefix) {
  return is(s, i, LayerType::parallel) ? feeders(s, i, prefix) : std::vector<Feeder>{};
}

}  // namespace

bool match_merge_branch_biases(const Seq& s, int i) {
  return closing_biases(const_cast<Seq&>(s), i, "").size() >= 2;
}

BIASLAB_COLD void apply_merge_branch_biases(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  const std::vector<Feeder> biases = closing_biases(s, i, prefix);
  out.layers = {name_of(prefix, i)};
  size_t keep = 0;
  while (keep < biases.size() && feeder_removable(biases[keep])) ++keep;
  if (keep == biases.size()) keep = 0;
  Mat& kept = biases[keep].node->find(biases[keep].local)->value;
  for (size_t k = 0; k < biases.size(); ++k) {
    if (k == keep) continue;
    const Mat& moved = biases[k].node->find(biases[k].local)->value;
    kept += moved;
    out.moves.push_back({biases[k].name, biases[keep].name});
    out.dof_removed += static_cast<int>(moved.size());
    drop_feeder(biases[k]);
  }
}

}  // namespace biaslab::folds_detail
