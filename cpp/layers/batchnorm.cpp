// batchnorm: each feature normalised over batch and tokens (torch.nn.BatchNorm1d on (B, F, T)):
// with the batch statistics in train mode (biased variance), with the running ones in eval
// mode, where it is a fixed affine map per feature. Math: norm.cpp.
#include "layers/norm.hpp"
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr const char* kModes[] = {"train", "eval", nullptr};
constexpr LayerOption kOptions[] = {
    {choice("mode", kModes, 0,
            "train normalises with the batch statistics, eval with the running statistics."),
     &LayerConfig::mode},
    {flag("affine", true, "Learns a per-feature scale and shift."), &LayerConfig::affine},
    {number("eps", 1e-5, 0, true, 1, kEpsHelp), &LayerConfig::eps},
};

void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  if (c.affine) norm_affine_params(ps, in, true);
  // Running statistics exist in both modes (as in torch); eval mode uses them.
  ps.push_back({"running_mean", ParamRole::buffer, in, 1, Init::run_mean, in});
  ps.push_back({"running_var", ParamRole::buffer, in, 1, Init::run_var, in});
}

void compile(CompileContext& ctx) {
  compile_norm(ctx, ctx.cfg().mode == BatchNormMode::train ? NormKind::batch_train : NormKind::batch_eval);
}

std::string explain(const Op& at, int) {
  if (at.norm == NormKind::batch_train) return "BatchNorm (train) subtracts each feature's batch mean";
  return "BatchNorm (eval) uses running statistics: nothing subtracts it (it fuses into the BatchNorm shift)";
}

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("batchnorm");
  const LayerConfig& c = n.cfg;
  return "batch_norm(" + std::to_string(n.in_width) + ", eps=" + py_float(c.eps) + ", affine=" + py_bool(c.affine) +
         ", mode=\"" + (c.mode == BatchNormMode::train ? "train" : "eval") + "\")";
}

// Its shift feeds what follows (tied to the gain by affine, so zeroed); in train mode it
// cancels any vector added to its input.
bool cancels_shift(const LayerConfig& c) { return c.mode == BatchNormMode::train; }
constexpr FoldTraits kFolds{{}, nullptr, "bias", nullptr, cancels_shift, nullptr};

}  // namespace

extern const LayerKind batchnorm{LayerType::batchnorm, "batchnorm",
                                 "Normalises each feature over batch and tokens (torch.nn.BatchNorm1d).",
                                 kOptions, nullptr, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter batchnorm_torch = torch;

}  // namespace biaslab::kinds
