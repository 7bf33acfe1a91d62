// What the fold rules share (internal to cpp/folds): sequence access, the traits a layer
// declares, parameter edits, and the rules' match/apply functions, defined in files by family.
#pragma once

#include <string>
#include <vector>

#include "folds/folds.hpp"
#include "layers/layer.hpp"

namespace biaslab::folds_detail {

using Seq = std::vector<LayerNode>;

inline std::string name_of(const std::string& prefix, int i) { return layer_name(prefix, static_cast<size_t>(i)); }

inline bool is(const Seq& s, int i, LayerType t) {
  return i >= 0 && i < static_cast<int>(s.size()) && s[i].cfg.type == t;
}
// The fold traits the layer at i declares (empty ones outside the sequence).
inline const FoldTraits& traits(const Seq& s, int i) {
  static const FoldTraits none{};
  return i >= 0 && i < static_cast<int>(s.size()) ? fold_traits(s[i].cfg.type) : none;
}
// The projection whose output rows a rule may centre (W - 1 mean(W)): the layer's `writes`,
// unless its rows read different inputs (grouped). Null: none.
inline const Projection* centrable_writer(const LayerNode& n) {
  const FoldTraits& t = fold_traits(n.cfg.type);
  return t.writes && !(t.grouped && t.grouped(n.cfg)) ? t.writes : nullptr;
}
inline bool is_bn(const Seq& s, int i, BatchNormMode mode) {
  return is(s, i, LayerType::batchnorm) && s[i].cfg.mode == mode;
}

inline void remove_param(LayerNode& n, const std::string& local) {
  for (auto it = n.params.begin(); it != n.params.end(); ++it)
    if (it->local == local) {
      n.params.erase(it);
      return;
    }
}

// Sets (creating if absent) a parameter, keeping the layer's declaration order. A flag the caller
// turned on may cover other parameters too (glu's `bias` covers its three projections): those
// are created as zeros, so the config still describes the layer exactly.
inline void set_param(LayerNode& n, const std::string& local, ParamRole role, const Mat& value) {
  if (Param* p = n.find(local)) {
    p->value = value;
    return;
  }
  // Declaration order from declare_params: re-declare and keep existing values.
  std::vector<Param> fresh = declare_params(n.cfg, n.in_width, n.out_width, 0, "");
  std::vector<Param> merged;
  for (auto& f : fresh) {
    if (f.local == local) merged.push_back({local, role, value, {}});  // biases and gains: vectors
    else if (const Param* old = n.find(f.local)) merged.push_back(*old);
    else merged.push_back({f.local, f.role, Mat::Zero(f.value.rows(), f.value.cols()), {}});
  }
  n.params = std::move(merged);
}

// Whether turning `flag` off would also drop parameters of `n` other than `local` (a flag that
// covers several projections, as glu's `bias`).
inline bool flag_covers_others(const LayerNode& n, bool LayerConfig::*flag, const std::string& local) {
  LayerConfig c = n.cfg;
  c.*flag = false;
  std::vector<Param> kept = declare_params(c, n.in_width, n.out_width, 0, "");
  for (const Param& p : n.params) {
    if (p.local == local) continue;
    bool declared = false;
    for (const Param& k : kept) declared = declared || k.local == p.local;
    if (!declared) return true;
  }
  return false;
}

// Centres a flat table of `rows` rows (pos_embedding's weight, row-major) over each of `groups`
// equal groups of features: within each row (`each_row`: what a per-token mean removes), or
// across all rows (GroupNorm's group means over a sample). Plain loops: rarely run, kept small.
inline void centre_table(Mat& flat, int rows, int groups, bool each_row) {
  const Eigen::Index F = flat.size() / rows, per = F / groups;
  double* v = flat.data();
  for (Eigen::Index g = 0; g < groups; ++g)
    for (Eigen::Index r0 = 0; r0 < rows; r0 += each_row ? 1 : rows) {
      const Eigen::Index r1 = each_row ? r0 + 1 : rows;
      double sum = 0;
      for (Eigen::Index r = r0; r < r1; ++r)
        for (Eigen::Index f = g * per; f < (g + 1) * per; ++f) sum += v[r * F + f];
      const double mean = sum / double((r1 - r0) * per);
      for (Eigen::Index r = r0; r < r1; ++r)
        for (Eigen::Index f = g * per; f < (g + 1) * per; ++f) v[r * F + f] -= mean;
    }
}

// Centres each feature of a flat table of `rows` rows over the rows (what a mean over the
// positions, BatchNorm train or InstanceNorm, removes).
inline void centre_table_columns(Mat& flat, int rows) {
  const Eigen::Index F = flat.size() / rows;
  double* v = flat.data();
  for (Eigen::Index f = 0; f < F; ++f) {
    double sum = 0;
    for (Eigen::Index r = 0; r < rows; ++r) sum += v[r * F + f];
    for (Eigen::Index r = 0; r < rows; ++r) v[r * F + f] -= sum / rows;
  }
}

inline Vec col(const LayerNode& n, const std::string& local) {
  const Param* p = n.find(local);
  return p ? Vec(p->value.col(0)) : Vec();
}

// The bias-like parameters whose values are added directly to the output of s[i] (so to the input
// of s[i+1]): the last layer's bias, through residual adds, and through a parallel block's sum
// the bias that closes each of its branches (bias_before_norm.cpp).
struct Feeder {
  LayerNode* node = nullptr;
  std::string local, name;
};
std::vector<Feeder> feeders(Seq& s, int i, const std::string& prefix);
// Removes a feeder's bias: through the config where a flag exists for it alone, else (a norm's
// shift tied to its gain by `affine`, glu's `bias` covering its other projections) set to zero.
void drop_feeder(const Feeder& f);
// Whether drop_feeder removes the parameter (rather than setting it to zero).
bool feeder_removable(const Feeder& f);

// The rules, by family (the table in folds.cpp orders them).
bool m_ln(const Seq& s, int i);
bool m_rms(const Seq& s, int i);
void apply_norm_affine(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_ln_to_rms(const Seq& s, int i);
void apply_ln_to_rms(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_linear_bn(const Seq& s, int i);
void apply_linear_bn(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_bn_linear(const Seq& s, int i);
void apply_bn_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out);
// The convolutions' rules (folds/conv.cpp; stand-ins that never match in the page's first-load
// engine, cpp/wasm/conv_lean.cpp).
bool match_conv_bn(const Seq& s, int i);
bool match_bn_conv(const Seq& s, int i);
void apply_bn_conv(Seq& s, int i, const std::string& prefix, FoldApplied& out);
void bn_scale_shift(const LayerNode& bn, Vec& s, Vec& t);
void record_bn_merge(const Seq& s, int bn_index, int into_index, const std::string& prefix, FoldApplied& out);
bool match_key_bias(const Seq& s, int i);
void apply_key_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_unrotated_key_bias(const Seq& s, int i);
bool match_centre_writers(const Seq& s, int i);
void apply_centre_writers(Seq& s, int i, const std::string& prefix, FoldApplied& out);
void apply_unrotated_key_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_merge_branch_biases(const Seq& s, int i);
void apply_merge_branch_biases(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_value_bias(const Seq& s, int i);
void apply_value_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_drop_before_norm(const Seq& s, int i);
void apply_drop_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_centre_before_norm(const Seq& s, int i);
void apply_centre_before_norm(Seq& s, int i, const std::string& prefix, FoldApplied& out);
bool match_linear_linear(const Seq& s, int i);
void apply_linear_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out);

}  // namespace biaslab::folds_detail
