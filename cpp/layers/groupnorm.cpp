// groupnorm: per sample, the features of each group normalised together over the tokens
// (torch.nn.GroupNorm on (B, F, T)). Math: norm.cpp (NormKind::group).
#include "layers/norm.hpp"
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {integer("num_groups", 4, 1, Limits::max_features, "groups",
             "Number of feature groups; must divide the width. Each group is normalised over its features "
             "and all tokens of a sequence, as torch.nn.GroupNorm over (batch, features, tokens): 1 group is "
             "LayerNorm over (C, H, W) in a CNN (the tokens as the pixels), with a per-channel gain and shift."),
     &LayerConfig::num_groups},
    {flag("affine", true, "Learns a per-feature scale and shift."), &LayerConfig::affine},
    {number("eps", 1e-5, 0, true, 1, kEpsHelp), &LayerConfig::eps},
};

std::optional<Error> check(const LayerConfig& c, int in, const std::string& path) {
  if (in % c.num_groups != 0)
    return Error{path + ".num_groups", std::to_string(c.num_groups) + " does not divide features " + std::to_string(in)};
  return std::nullopt;
}

void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  if (c.affine) norm_affine_params(ps, in, true);
}

void compile(CompileContext& ctx) { compile_norm(ctx, NormKind::group); }

std::string explain(const Op&, int) {
  return "GroupNorm subtracts each group's mean: the group-constant part cancels";
}

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  // torch refuses group statistics of one value: a variant class handles that case.
  const long per_group = long(needs.shape.batch) * needs.shape.tokens * (n.in_width / n.cfg.num_groups);
  needs.add(per_group == 1 ? "groupnorm_one_value" : "groupnorm");
  return "GroupNorm(" + std::to_string(n.cfg.num_groups) + ", " + std::to_string(n.in_width) +
         ", eps=" + py_float(n.cfg.eps) + ", affine=" + py_bool(n.cfg.affine) + ")";
}

// Its shift feeds what follows; it cancels the mean of each group of a vector added to its input,
// taken over all of a sample's tokens.
int groups(const LayerConfig& c) { return c.num_groups; }
constexpr FoldTraits kFolds{{}, nullptr, "bias", nullptr, nullptr, groups, nullptr, nullptr, /*sample_statistics=*/true};

}  // namespace

extern const LayerKind groupnorm{LayerType::groupnorm, "groupnorm",
                                 "Normalises groups of features together (torch.nn.GroupNorm).",
                                 kOptions, check, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter groupnorm_torch = torch;

}  // namespace biaslab::kinds
