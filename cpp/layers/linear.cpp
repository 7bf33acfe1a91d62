// linear: y = x W^T + b over the features (torch.nn.Linear). Its op (OpKind::linear) is the
// affine map of ops.hpp; the JVP is dx W^T (model/jvp.cpp keeps it per token).
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {integer("out_features", 0, 1, Limits::max_features, "features",
             "Output width; omit it to keep the input width.", "the input width"),
     &LayerConfig::out_features},
    {flag("bias", true, "Adds a learned bias vector to the output."), &LayerConfig::bias},
};

int out_width(const LayerConfig& c, int in) { return c.out_features > 0 ? c.out_features : in; }

// weight (out, in), bias (out, 1); both U(-1/sqrt(in), 1/sqrt(in)) as torch.
void params(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps) {
  ps.push_back({"weight", ParamRole::weight, out, in, Init::fan_in, in});
  if (c.bias) ps.push_back({"bias", ParamRole::bias, out, 1, Init::fan_in, in});
}

void compile(CompileContext& ctx) {
  Op op = ctx.op(OpKind::linear);
  const int at = ctx.next();
  op.w = ctx.param("weight", at);
  op.b = ctx.param("bias", at);
  ctx.emit(op);
}

void sync(LayerNode& n) {
  if (const Param* w = n.find("weight")) n.cfg.out_features = static_cast<int>(w->value.rows());
}

// The layer is its one projection: it reads the input and writes the output.
constexpr Projection kProjection[] = {{"", &LayerConfig::bias}};
constexpr FoldTraits kFolds{kProjection, &kProjection[0]};

std::string torch(const LayerNode& n, TorchNeeds&) {
  return "nn.Linear(" + std::to_string(n.in_width) + ", " + std::to_string(n.out_width) +
         ", bias=" + py_bool(n.cfg.bias) + ")";
}

}  // namespace

extern const LayerKind linear{LayerType::linear, "linear",
                              "Affine map x W^T + b over the features (torch.nn.Linear).",
                              kOptions, nullptr, out_width, params, compile, nullptr,
                              /*has_body=*/false, sync, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter linear_torch = torch;

}  // namespace biaslab::kinds
