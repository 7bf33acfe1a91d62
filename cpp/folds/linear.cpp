// Fold rule of two Linears in a row.
#include "folds/rules.hpp"

#include "core/cold.hpp"

namespace biaslab::folds_detail {

// --- Linear -> Linear ------------------------------------------------------------------------
bool match_linear_linear(const Seq& s, int i) {
  return is(s, i, LayerType::linear) && is(s, i + 1, LayerType::linear);
}
BIASLAB_COLD void apply_linear_linear(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& a = s[i];
  const LayerNode& b = s[i + 1];
  const Mat W1 = a.find("weight")->value, W2 = b.find("weight")->value;
  const bool has_bias = a.find("bias") || b.find("bias");
  Vec bias = Vec::Zero(W2.rows());
  if (a.find("bias")) bias += W2 * col(a, "bias");
  if (b.find("bias")) bias += col(b, "bias");
  const std::string an = name_of(prefix, i), bn = name_of(prefix, i + 1);
  out.layers = {an, bn};
  out.moves.push_back({param_name(bn, "weight"), param_name(an, "weight")});
  if (a.find("bias")) out.moves.push_back({param_name(an, "bias"), param_name(an, "bias")});
  if (b.find("bias")) out.moves.push_back({param_name(bn, "bias"), param_name(an, "bias")});
  const long before = W1.size() + W2.size() + (a.find("bias") ? W1.rows() : 0) + (b.find("bias") ? W2.rows() : 0);
  a.cfg.out_features = static_cast<int>(W2.rows());
  a.cfg.bias = has_bias;
  a.out_width = static_cast<int>(W2.rows());
  a.params.clear();
  a.params.push_back({"weight", ParamRole::weight, W2 * W1, {}});
  if (has_bias) a.params.push_back({"bias", ParamRole::bias, bias, {}});
  out.dof_removed = static_cast<int>(before - (W2.rows() * W1.cols() + (has_bias ? W2.rows() : 0)));
  s.erase(s.begin() + i + 1);
}

}  // namespace biaslab::folds_detail
