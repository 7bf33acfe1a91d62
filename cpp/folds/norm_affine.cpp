// Fold rules of the norms' affine parameters: LayerNorm and RMSNorm gains (and shift) into the
// projections that read their output, and LayerNorm -> RMSNorm after a centred writer.
#include "folds/rules.hpp"

#include "core/cold.hpp"

namespace biaslab::folds_detail {

// --- norm affine into the following projection(s) -------------------------------------------
// LN(x; g, b) -> Linear(W, c)  ==  LN(x) -> Linear(W diag(g), W b + c); likewise RMSNorm (no b)
// and the q/k/v projections of a following attention.
bool match_norm_affine(const Seq& s, int i, LayerType norm) {
  if (!is(s, i, norm) || !s[i].cfg.elementwise_affine || s[i].params.empty()) return false;
  return i + 1 < static_cast<int>(s.size()) && input_reads(traits(s, i + 1), s[i + 1].cfg).count > 0;
}

BIASLAB_COLD void apply_norm_affine(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& nrm = s[i];
  LayerNode& nxt = s[i + 1];
  const Vec g = col(nrm, "weight");
  const Vec beta = col(nrm, "bias");
  const std::string nn = name_of(prefix, i), xn = name_of(prefix, i + 1);
  out.layers = {nn, xn};
  auto fold_into = [&](const Projection& pr) {
    const std::string proj = pr.prefix;
    Param* w = nxt.find(proj + "weight");
    const Mat W = w->value;
    w->value = W * g.asDiagonal();
    if (beta.size()) {
      Vec b = W * beta;
      if (const Param* c = nxt.find(proj + "bias")) b += c->value.col(0);
      nxt.cfg.*pr.bias = true;
      set_param(nxt, proj + "bias", ParamRole::bias, b);
    }
  };
  // Into every projection that reads the next layer's input (a Linear's one; attention's q, k, v,
  // or q alone in cross-attention).
  const Items<Projection> projs = input_reads(traits(s, i + 1), nxt.cfg);
  for (const Projection& p : projs) fold_into(p);
  for (const Projection& p : projs) out.moves.push_back({param_name(nn, "weight"), param_name(xn, std::string(p.prefix) + "weight")});
  if (beta.size())
    for (const Projection& p : projs) out.moves.push_back({param_name(nn, "bias"), param_name(xn, std::string(p.prefix) + "bias")});
  out.dof_removed = static_cast<int>(g.size() + beta.size());
  nrm.cfg.elementwise_affine = false;
  nrm.params.clear();
}

// --- LayerNorm -> RMSNorm when its input is mean-zero -------------------------------------------
// If the layer writing into a LayerNorm (without shift) has centred output rows, the LayerNorm
// subtracts nothing and equals an RMSNorm: centre the writer (W' = C W, b' = C b with
// C = I - 11^T/n) and swap the norm.
bool match_ln_to_rms(const Seq& s, int i) {
  if (!is(s, i + 1, LayerType::layernorm)) return false;
  const LayerNode& ln = s[i + 1];
  if (ln.find("bias")) return false;
  return i >= 0 && centrable_writer(s[i]) != nullptr;
}
BIASLAB_COLD void apply_ln_to_rms(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  LayerNode& w = s[i];
  const std::string proj = traits(s, i).writes->prefix;
  Mat& W = w.find(proj + "weight")->value;
  W.rowwise() -= W.colwise().mean();
  if (Param* b = w.find(proj + "bias")) b->value.array() -= b->value.mean();
  LayerNode& ln = s[i + 1];
  const double eps = ln.cfg.eps;
  const bool affine = ln.cfg.elementwise_affine;
  ln.cfg = make_layer(LayerType::rmsnorm);
  ln.cfg.eps = eps;
  ln.cfg.elementwise_affine = affine;
  out.layers = {name_of(prefix, i), name_of(prefix, i + 1)};
  out.moves.push_back({param_name(name_of(prefix, i), proj + "weight"), param_name(name_of(prefix, i), proj + "weight")});
  out.dof_removed = static_cast<int>(W.cols()) + (w.find(proj + "bias") ? 1 : 0);
}

bool m_ln(const Seq& s, int i) { return match_norm_affine(s, i, LayerType::layernorm); }
bool m_rms(const Seq& s, int i) { return match_norm_affine(s, i, LayerType::rmsnorm); }

}  // namespace biaslab::folds_detail
