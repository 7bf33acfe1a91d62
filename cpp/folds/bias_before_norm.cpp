// Fold rules of a bias in front of a layer that cancels it (BatchNorm train, InstanceNorm) or its
// mean (LayerNorm, softmax, GroupNorm per group). The bias is found through what the layers
// declare: the projection that writes the output, or a norm's shift.
#include "folds/rules.hpp"

#include "core/cold.hpp"

namespace biaslab::folds_detail {

// --- biases in front of a normalisation ------------------------------------------------------
namespace {
BIASLAB_COLD void feeders(Seq& s, int i, const std::string& prefix, std::vector<Feeder>& out) {
  if (i < 0 || i >= static_cast<int>(s.size())) return;
  LayerNode& n = s[i];
  const std::string nm = name_of(prefix, i);
  // A residual's body or a parallel's branches: the last layer of each.
  if (!n.body.empty() || !n.branches.empty()) {
    for_each_sequence(n, nm, [&](Seq& seq, const std::string& p, int) { feeders(seq, static_cast<int>(seq.size()) - 1, p, out); });
    return;
  }
  // The bias of the projection that writes the output, or the output shift of a norm.
  const FoldTraits& t = fold_traits(n.cfg.type);
  const std::string local = t.writes ? std::string(t.writes->prefix) + "bias" : t.shift ? t.shift : "";
  if (local.empty() || !n.find(local)) return;
  out.push_back(Feeder{&n, local, param_name(nm, local)});
}
}  // namespace

std::vector<Feeder> feeders(Seq& s, int i, const std::string& prefix) {
  std::vector<Feeder> out;
  feeders(s, i, prefix, out);
  return out;
}
bool has_feeder(const Seq& s, int i) { return !feeders(const_cast<Seq&>(s), i, "").empty(); }


bool absorbs_all(const Seq& s, int j) {
  const auto cancels = traits(s, j).cancels_shift;
  return cancels && cancels(s[j].cfg);
}

// A position table right before a layer that cancels any constant added to the tokens
// (BatchNorm train, InstanceNorm: a mean over the positions) loses the part every position
// shares: each feature's mean over the rows.
bool table_before(const Seq& s, int i) { return i >= 0 && i < static_cast<int>(s.size()) && traits(s, i).table; }

bool match_drop_before_norm(const Seq& s, int i) {
  return absorbs_all(s, i + 1) && (has_feeder(s, i) || table_before(s, i));
}
BIASLAB_COLD void apply_drop_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  if (table_before(s, i)) {
    LayerNode& n = s[i];
    centre_table_columns(n.find(traits(s, i).table)->value, n.cfg.positions);
    const std::string name = param_name(name_of(prefix, i), traits(s, i).table);
    out.moves.push_back({name, name});
    out.dof_removed += n.in_width;
    return;
  }
  for (const Feeder& f : feeders(s, i, prefix)) {
    out.moves.push_back({f.name, ""});
    out.dof_removed += static_cast<int>(f.node->find(f.local)->value.size());
    drop_feeder(f);
  }
}

namespace {
bool LayerConfig::*own_flag(const Feeder& f) {
  const FoldTraits& t = fold_traits(f.node->cfg.type);
  bool LayerConfig::*flag = t.writes ? t.writes->bias : t.shift_flag;
  return flag && !flag_covers_others(*f.node, flag, f.local) ? flag : nullptr;
}
}  // namespace

bool feeder_removable(const Feeder& f) { return own_flag(f) != nullptr; }

BIASLAB_COLD void drop_feeder(const Feeder& f) {
  if (bool LayerConfig::*flag = own_flag(f)) {
    f.node->cfg.*flag = false;
    remove_param(*f.node, f.local);
  } else {
    f.node->find(f.local)->value.setZero();
  }
}

// Centring: LayerNorm and softmax cancel the mean of a bias, GroupNorm each group's mean.
int centre_groups(const Seq& s, int j) {
  const auto groups = traits(s, j).cancels_mean_groups;
  return groups ? groups(s[j].cfg) : 0;
}
// A position table right before the norm: each of its rows is centred the same way, or (GroupNorm)
// each group across all rows.
bool match_centre_before_norm(const Seq& s, int i) {
  return centre_groups(s, i + 1) > 0 && (has_feeder(s, i) || table_before(s, i));
}
BIASLAB_COLD void apply_centre_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  const int G = centre_groups(s, i + 1);
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  if (table_before(s, i)) {
    LayerNode& n = s[i];
    const bool each_row = !traits(s, i + 1).sample_statistics;
    centre_table(n.find(traits(s, i).table)->value, n.cfg.positions, G, each_row);
    const std::string name = param_name(name_of(prefix, i), traits(s, i).table);
    out.moves.push_back({name, name});
    out.dof_removed += each_row ? n.cfg.positions * G : G;
    return;
  }
  for (const Feeder& f : feeders(s, i, prefix)) {
    Mat& b = f.node->find(f.local)->value;
    const int n = static_cast<int>(b.rows()), per = n / G;
    for (int g = 0; g < G; ++g) b.middleRows(g * per, per).array() -= b.middleRows(g * per, per).mean();
    out.moves.push_back({f.name, f.name});
    out.dof_removed += G;
  }
}

}  // namespace biaslab::folds_detail
