// Fold rules inside attention: the key bias (softmax is shift invariant) and the value bias (rows
// of P sum to 1).
#include "folds/rules.hpp"

#include "core/cold.hpp"
#include "layers/attention.hpp"

namespace biaslab::folds_detail {

// --- attention biases ------------------------------------------------------------------------
bool match_key_bias(const Seq& s, int i) {
  // Sinks: the sink logit does not move with the key bias, so the row shift is not cancelled.
  return is(s, i, LayerType::attention) && s[i].cfg.k_bias && !s[i].cfg.rope && !s[i].cfg.sinks &&
         s[i].cfg.qk_norm == QkNorm::none;
}
BIASLAB_COLD void apply_key_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  const std::string n = name_of(prefix, i);
  out.layers = {n};
  out.moves.push_back({n + ".k_proj.bias", ""});
  out.dof_removed = static_cast<int>(col(s[i], "k_proj.bias").size());
  s[i].cfg.k_bias = false;
  remove_param(s[i], "k_proj.bias");
}

// Partial RoPE rotates only the first rotary_dim dimensions of each head: on the others the key
// bias still adds q_i . b_K to a whole score row, which softmax cancels. Zeroing those entries
// removes kv_heads * (head_dim - rotary_dim) degrees of freedom and no parameter.
bool match_unrotated_key_bias(const Seq& s, int i) {
  if (!is(s, i, LayerType::attention)) return false;
  const LayerConfig& c = s[i].cfg;
  return c.k_bias && c.rope && c.rotary_dim > 0 && c.rotary_dim < s[i].in_width / c.num_heads && !c.sinks &&
         c.qk_norm == QkNorm::none;
}
BIASLAB_COLD void apply_unrotated_key_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& a = s[i];
  const int d = a.in_width / a.cfg.num_heads, r = a.cfg.rotary_dim, kv = attention_kv_heads(a.cfg);
  Mat& b = a.find("k_proj.bias")->value;
  for (int h = 0; h < kv; ++h) b.middleRows(h * d + r, d - r).setZero();
  const std::string n = name_of(prefix, i);
  out.layers = {n};
  out.moves.push_back({n + ".k_proj.bias", n + ".k_proj.bias"});
  out.dof_removed = kv * (d - r);
}

// softmax rows sum to 1, so P (1 b_V^T) = 1 b_V^T: the value bias adds W_O b_V to every token
// (with grouped-query attention W_O repeat_kv(b_V): each query head reads its group's b_V).
// Sinks: rows sum to 1 - p_sink(i), so the value bias adds a per-token amount (explain_own says so).
bool match_value_bias(const Seq& s, int i) {
  return is(s, i, LayerType::attention) && s[i].cfg.v_bias && !s[i].cfg.sinks;
}
BIASLAB_COLD void apply_value_bias(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& a = s[i];
  const Vec bv = col(a, "v_proj.bias");
  const int heads = a.cfg.num_heads;
  Vec bo = a.find("o_proj.weight")->value * (repeat_kv_matrix(heads, attention_kv_heads(a.cfg), a.in_width / heads) * bv);
  if (a.find("o_proj.bias")) bo += col(a, "o_proj.bias");
  a.cfg.v_bias = false;
  remove_param(a, "v_proj.bias");
  a.cfg.o_bias = true;
  set_param(a, "o_proj.bias", ParamRole::bias, bo);
  const std::string n = name_of(prefix, i);
  out.layers = {n};
  out.moves.push_back({n + ".v_proj.bias", n + ".o_proj.bias"});
  out.dof_removed = static_cast<int>(bv.size());
}

}  // namespace biaslab::folds_detail
