// instancenorm: each feature of each sample normalised over its tokens (torch.nn.InstanceNorm1d
// on (B, F, T); affine off by default, as in torch). Math: norm.cpp (NormKind::instance).
#include "layers/norm.hpp"
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {flag("affine", false, "Learns a per-feature scale and shift (off by default, as in torch)."),
     &LayerConfig::affine},
    {number("eps", 1e-5, 0, true, 1, kEpsHelp), &LayerConfig::eps},
};

void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  if (c.affine) norm_affine_params(ps, in, true);
}

void compile(CompileContext& ctx) { compile_norm(ctx, NormKind::instance); }

std::string explain(const Op&, int) { return "InstanceNorm subtracts each feature's mean over the tokens"; }

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("instancenorm");
  return "InstanceNorm1d(" + std::to_string(n.in_width) + ", eps=" + py_float(n.cfg.eps) +
         ", affine=" + py_bool(n.cfg.affine) + ")";
}

// Its shift feeds what follows; it cancels any vector added to its input (constant over tokens).
bool cancels_shift(const LayerConfig&) { return true; }
constexpr FoldTraits kFolds{{}, nullptr, "bias", nullptr, cancels_shift, nullptr};

}  // namespace

extern const LayerKind instancenorm{LayerType::instancenorm, "instancenorm",
                                    "Normalises each feature over the tokens of one sequence (torch.nn.InstanceNorm1d).",
                                    kOptions, nullptr, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter instancenorm_torch = torch;

}  // namespace biaslab::kinds
