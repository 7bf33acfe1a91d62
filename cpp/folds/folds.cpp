// The fold rules' table and how they are found and applied. The rules themselves are in files by
// family (norm_affine, batchnorm, conv, attention, bias_before_norm, residual_stream, parallel, linear); they match a layer and its
// neighbour on what the layers declare (layers/layer.hpp, FoldTraits).
#include "folds/folds.hpp"

#include "core/cold.hpp"
#include "folds/rules.hpp"

namespace biaslab {

using namespace folds_detail;

BIASLAB_COLD const std::vector<FoldRule>& fold_rules() {
  static const std::vector<FoldRule> rules = {
      {"fold_layernorm_affine", "LayerNorm gain and shift into the next projection",
       R"(W\,\mathrm{LN}_{\gamma,\beta}(x)+b = (W\operatorname{diag}\gamma)\,\mathrm{LN}(x) + (W\beta+b))",
       true, m_ln, apply_norm_affine},
      {"fold_rmsnorm_gain", "RMSNorm gain into the next projection",
       R"(W\,\mathrm{RMS}_{\gamma}(x)+b = (W\operatorname{diag}\gamma)\,\mathrm{RMS}(x) + b)", true, m_rms,
       apply_norm_affine},
      {"fuse_linear_batchnorm_eval", "Linear then BatchNorm (eval) into one Linear",
       R"(s=\gamma/\sqrt{\sigma^2+\epsilon}:\ W'=\operatorname{diag}(s)W,\ b'=s\odot(b-\mu)+\beta)", true,
       match_linear_bn, apply_linear_bn},
      {"fuse_batchnorm_eval_linear", "BatchNorm (eval) then Linear into one Linear",
       R"(s=\gamma/\sqrt{\sigma^2+\epsilon}:\ W'=W\operatorname{diag}(s),\ b'=W(\beta-s\odot\mu)+b)", true,
       match_bn_linear, apply_bn_linear},
      {"fuse_conv_batchnorm_eval", "Convolution then BatchNorm (eval) into one convolution",
       R"(s=\gamma/\sqrt{\sigma^2+\epsilon}:\ W'_{o}=s_o W_{o},\ b'=s\odot(b-\mu)+\beta)", true,
       match_conv_bn, apply_linear_bn},
      {"fuse_batchnorm_eval_conv", "BatchNorm (eval) then convolution into one convolution (exact only without padding)",
       R"(W'_{o,c}=W_{o,c}\,s_c,\ b'_o=b_o+\textstyle\sum_{c,k}W_{o,c,k}\,t_c \text{ (inside the grid)})", true,
       match_bn_conv, apply_bn_conv},
      {"drop_key_bias", "Drop the key bias (softmax is shift invariant)",
       R"(\mathrm{softmax}_j(q_i\cdot(k_j+b_K)) = \mathrm{softmax}_j(q_i\cdot k_j))", true, match_key_bias,
       apply_key_bias},
      {"drop_unrotated_key_bias", "Zero the key bias where partial RoPE does not rotate",
       R"(b_K' = (b_K^{\mathrm{rot}}, 0):\ q_i\cdot(R_j k_j + (0, b_K^{\mathrm{pass}})) \text{ shifts row } i \text{ alike})", false,
       match_unrotated_key_bias, apply_unrotated_key_bias},
      {"fold_value_bias", "Value bias into the output bias",
       R"(\textstyle\sum_j P_{ij}=1 \Rightarrow b_O' = b_O + W_O b_V,\ b_V' = 0)", true, match_value_bias,
       apply_value_bias},
      {"drop_bias_before_norm", "Drop a bias that BatchNorm (train) or InstanceNorm subtracts",
       R"(\mathrm{BN}(z+b)=\mathrm{BN}(z))", true, match_drop_before_norm, apply_drop_before_norm},
      {"centre_bias_before_norm", "Centre a bias before LayerNorm, softmax (its mean) or GroupNorm (group means)",
       R"(\mathrm{LN}(z+b)=\mathrm{LN}(z+b-\bar b\,\mathbf 1))", false, match_centre_before_norm,
       apply_centre_before_norm},
      {"centre_writers", "Centre the layers writing into a residual stream that only LayerNorms read",
       R"(\mathrm{LN}(x+\textstyle\sum_l W_l h_l+b_l)=\mathrm{LN}(x+\sum_l C(W_l h_l+b_l)),\ C=I-\tfrac1n\mathbf 1\mathbf 1^\top)",
       false, match_centre_writers, apply_centre_writers},
      {"merge_branch_biases", "Merge the biases that close a parallel block's branches into one",
       R"(x+\textstyle\sum_b\big(g_b(x)+c_b\big)=x+\sum_b g_b(x)+c,\ c=\sum_b c_b)", true,
       match_merge_branch_biases, apply_merge_branch_biases},
      {"merge_linear_linear", "Linear then Linear into one Linear",
       R"(W_2(W_1x+b_1)+b_2=(W_2W_1)x+(W_2b_1+b_2))", true, match_linear_linear, apply_linear_linear},
      {"layernorm_to_rmsnorm", "LayerNorm to RMSNorm after centring the layer that writes into it",
       R"(C=I-\tfrac1n\mathbf 1\mathbf 1^\top:\ \mathrm{LN}(Wx+b)=\mathrm{RMS}(CWx+Cb))", false,
       match_ln_to_rms, apply_ln_to_rms},
  };
  return rules;
}

std::string site_prefix(const FoldSite& site) {
  std::string p = kTopLayers;
  for (const FoldStep& st : site.path) {
    const std::string layer = layer_name(p, static_cast<size_t>(st.layer));
    p = st.branch < 0 ? body_prefix(layer) : branch_prefix(layer, static_cast<size_t>(st.branch));
  }
  return p;
}

std::vector<LayerNode>& site_sequence(std::vector<LayerNode>& top, const FoldSite& site) {
  std::vector<LayerNode>* seq = &top;
  for (const FoldStep& st : site.path) seq = &sequence_of((*seq)[st.layer], st.branch);
  return *seq;
}

const std::vector<LayerNode>& site_sequence(const std::vector<LayerNode>& top, const FoldSite& site) {
  return site_sequence(const_cast<std::vector<LayerNode>&>(top), site);
}

namespace {

BIASLAB_COLD void collect(const Seq& seq, std::vector<FoldStep>& path, std::vector<FoldCandidate>& out) {
  for (int i = 0; i < static_cast<int>(seq.size()); ++i) {
    for (const FoldRule& r : fold_rules())
      if (r.match(seq, i)) out.push_back({&r, {path, i}});
    for_each_sequence(seq[i], "", [&](const Seq& inner, const std::string&, int branch) {
      path.push_back({i, branch});
      collect(inner, path, out);
      path.pop_back();
    });
  }
}

}  // namespace

BIASLAB_COLD std::vector<FoldCandidate> find_folds(const Network& net) {
  std::vector<FoldCandidate> out;
  std::vector<FoldStep> path;
  collect(net.layers, path, out);
  return out;
}

BIASLAB_COLD Network apply_fold(const Network& net, const FoldCandidate& c, FoldApplied& out) {
  Network copy = net;
  out = FoldApplied{};
  out.rule = c.rule->id;
  c.rule->apply(site_sequence(copy.layers, c.site), c.site.index, site_prefix(c.site), out);
  sync_network(copy);
  return copy;
}

}  // namespace biaslab
