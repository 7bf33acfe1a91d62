// silu: x * sigmoid(x) (torch.nn.SiLU; the "swish" of SwiGLU). Smooth, so no kink: every
// direction of a bias before it reaches the output for almost every input.
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

// sigmoid(x) = 1 / (1 + exp(-x)); f(x) = x sigmoid(x); f'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))).
template <class S>
MatT<S> silu_f(const MatT<S>& x) {
  return x.unaryExpr([](S v) { return v / (S(1) + std::exp(-v)); });
}
Mat silu_d(const Mat& x) {
  return x.unaryExpr([](double v) {
    const double s = 1 / (1 + std::exp(-v));
    return s * (1 + v * (1 - s));
  });
}
constexpr Activation kSilu{"silu", silu_f<float>, silu_f<double>, silu_d, /*kinked=*/false};

void compile(CompileContext& ctx) { compile_activation(ctx, kSilu); }

std::string torch(const LayerNode&, TorchNeeds&) { return "nn.SiLU()"; }

}  // namespace

const Activation& silu_activation() { return kSilu; }

extern const LayerKind silu{LayerType::silu, "silu", "Sigmoid linear unit, x * sigmoid(x) (torch.nn.SiLU).",
                            {}, nullptr, nullptr, nullptr, compile, explain_nonlinearity};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter silu_torch = torch;

}  // namespace biaslab::kinds
