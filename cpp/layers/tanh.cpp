// tanh (torch.nn.Tanh): smooth and saturating; its derivative 1 - tanh(x)^2 vanishes only in
// the limit, so every direction of a bias before it still reaches the output.
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

template <class S>
MatT<S> tanh_f(const MatT<S>& x) {
  return x.unaryExpr([](S v) { return std::tanh(v); });
}
Mat tanh_d(const Mat& x) {
  return x.unaryExpr([](double v) {
    const double t = std::tanh(v);
    return 1 - t * t;
  });
}
constexpr Activation kTanh{"tanh", tanh_f<float>, tanh_f<double>, tanh_d, /*kinked=*/false};

void compile(CompileContext& ctx) { compile_activation(ctx, kTanh); }

std::string torch(const LayerNode&, TorchNeeds&) { return "nn.Tanh()"; }

}  // namespace

extern const LayerKind tanh{LayerType::tanh, "tanh", "Hyperbolic tangent (torch.nn.Tanh).",
                            {}, nullptr, nullptr, nullptr, compile, explain_nonlinearity};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter tanh_torch = torch;

}  // namespace biaslab::kinds
