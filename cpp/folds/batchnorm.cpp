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
  const std::string ln = name_of(prefix, i), bn = name_of(prefix, i + 1);
  out.layers = {ln, bn};
  for (const auto& p : s[i + 1].params)
    if (p.role != ParamRole::buffer) out.moves.push_back({param_name(bn, p.local), param_name(ln, p.local == "weight" ? "weight" : "bias")});
  out.dof_removed = s[i + 1].cfg.affine ? 2 * static_cast<int>(sc.size()) : 0;
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
  const std::string bn = name_of(prefix, i), ln = name_of(prefix, i + 1);
  out.layers = {bn, ln};
  for (const auto& p : s[i].params)
    if (p.role != ParamRole::buffer) out.moves.push_back({param_name(bn, p.local), param_name(ln, p.local == "weight" ? "weight" : "bias")});
  out.dof_removed = s[i].cfg.affine ? 2 * static_cast<int>(sc.size()) : 0;
  s.erase(s.begin() + i);
}

}  // namespace biaslab::folds_detail
