// Fold rules of BatchNorm in eval mode (a fixed affine map per feature) with a neighbouring Linear.
#include "folds/rules.hpp"

#include "core/cold.hpp"

namespace biaslab::folds_detail {

// --- Linear + BatchNorm(eval) ------------------------------------------------------------------
// BN_eval(z) = s (z - mu) + beta with s = gamma / sqrt(var + eps).
BIASLAB_COLD void bn_scale_shift(const LayerNode& bn, Vec& s, Vec& t) {
  const Vec mu = col(bn, "running_mean"), var = col(bn, "running_var");
  const Vec g = bn.find("weight") ? col(bn, "weight") : Vec::Ones(mu.size());
  const Vec beta = bn.find("bias") ? col(bn, "bias") : Vec::Zero(mu.size());
  s = g.array() / (var.array() + bn.cfg.eps).sqrt();
  t = beta - s.cwiseProduct(mu);  // BN_eval(z) = s z + t
}

// The record of a BatchNorm (eval) at `bn_index` merged into the layer at `into_index`: its gain
// and shift move into that layer's weight and bias (the running statistics are buffers).
BIASLAB_COLD void record_bn_merge(const Seq& s, int bn_index, int into_index, const std::string& prefix, FoldApplied& out) {
  const std::string bn = name_of(prefix, bn_index), into = name_of(prefix, into_index);
  out.layers = bn_index < into_index ? std::vector<std::string>{bn, into} : std::vector<std::string>{into, bn};
  for (const auto& p : s[bn_index].params)
    if (p.role != ParamRole::buffer) out.moves.push_back({param_name(bn, p.local), param_name(into, p.local == "weight" ? "weight" : "bias")});
  out.dof_removed = s[bn_index].cfg.affine ? 2 * static_cast<int>(s[bn_index].in_width) : 0;
}

bool match_linear_bn(const Seq& s, int i) {
  return is(s, i, LayerType::linear) && is_bn(s, i + 1, BatchNormMode::eval);
}
BIASLAB_COLD void apply_linear_bn(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Vec sc, t;
  bn_scale_shift(s[i + 1], sc, t);
  LayerNode& lin = s[i];
  const Vec b = lin.find("bias") ? col(lin, "bias") : Vec::Zero(sc.size());
  Param* w = lin.find("weight");
  w->value = sc.asDiagonal() * w->value;
  lin.cfg.bias = true;
  set_param(lin, "bias", ParamRole::bias, sc.cwiseProduct(b) + t);
  record_bn_merge(s, i + 1, i, prefix, out);
  s.erase(s.begin() + i + 1);
}

bool match_bn_linear(const Seq& s, int i) {
  return is_bn(s, i, BatchNormMode::eval) && is(s, i + 1, LayerType::linear);
}
BIASLAB_COLD void apply_bn_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Vec sc, t;
  bn_scale_shift(s[i], sc, t);
  LayerNode& lin = s[i + 1];
  const Mat W = lin.find("weight")->value;
  Vec b = W * t;
  if (lin.find("bias")) b += col(lin, "bias");
  lin.find("weight")->value = W * sc.asDiagonal();
  lin.cfg.bias = true;
  set_param(lin, "bias", ParamRole::bias, b);
  record_bn_merge(s, i, i + 1, prefix, out);
  s.erase(s.begin() + i);
}

}  // namespace biaslab::folds_detail
