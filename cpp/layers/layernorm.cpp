// layernorm: each token normalised over its features, then gain * x + shift
// (torch.nn.LayerNorm; torch >= 2.1 has bias=). Math: norm.cpp (NormKind::layer).
#include "layers/norm.hpp"
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {flag("elementwise_affine", true, "Learns a per-feature scale after normalising."),
     &LayerConfig::elementwise_affine},
    {flag("bias", true, "Learns a per-feature shift too (only with elementwise_affine)."),
     &LayerConfig::bias},
    {number("eps", 1e-5, 0, true, 1, kEpsHelp), &LayerConfig::eps},
};

void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  if (c.elementwise_affine) norm_affine_params(ps, in, c.bias);
}

void compile(CompileContext& ctx) { compile_norm(ctx, NormKind::layer); }

std::string explain(const Op&, int) {
  return "LayerNorm subtracts each token's mean: only the all-ones direction cancels";
}

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  const LayerConfig& c = n.cfg;
  const std::string F = std::to_string(n.in_width), eps = py_float(c.eps);
  if (c.elementwise_affine && !c.bias) {
    needs.add("layer_norm_without_bias");
    return "layer_norm_without_bias(" + F + ", eps=" + eps + ")";
  }
  return "nn.LayerNorm(" + F + ", eps=" + eps + (c.elementwise_affine ? "" : ", elementwise_affine=False") + ")";
}

// Its shift feeds what follows (removable on its own: bias=false); it cancels the mean of a
// vector added to its input.
int one_group(const LayerConfig&) { return 1; }
constexpr FoldTraits kFolds{{}, nullptr, "bias", &LayerConfig::bias, nullptr, one_group};

}  // namespace

extern const LayerKind layernorm{LayerType::layernorm, "layernorm",
                                 "Normalises each token over its features (torch.nn.LayerNorm).",
                                 kOptions, nullptr, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter layernorm_torch = torch;

}  // namespace biaslab::kinds
