// rmsnorm: each token divided by the root mean square of its features, then a gain
// (torch.nn.RMSNorm). Math: norm.cpp (NormKind::rms).
#include "layers/norm.hpp"
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {flag("elementwise_affine", true, "Learns a per-feature scale after normalising."),
     &LayerConfig::elementwise_affine},
    {number("eps", 1e-6, 0, true, 1, kEpsHelp), &LayerConfig::eps},
};

void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  if (c.elementwise_affine) norm_affine_params(ps, in, false);
}

void compile(CompileContext& ctx) { compile_norm(ctx, NormKind::rms); }

std::string explain(const Op&, int) { return "RMSNorm does not centre (it is only scale invariant)"; }

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("rmsnorm");
  return "RMSNorm(" + std::to_string(n.in_width) + ", eps=" + py_float(n.cfg.eps) +
         ", elementwise_affine=" + py_bool(n.cfg.elementwise_affine) + ")";
}

}  // namespace

extern const LayerKind rmsnorm{LayerType::rmsnorm, "rmsnorm",
                               "Divides each token by the root mean square of its features (torch.nn.RMSNorm).",
                               kOptions, nullptr, nullptr, params, compile, explain};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter rmsnorm_torch = torch;

}  // namespace biaslab::kinds
