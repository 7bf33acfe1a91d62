// relu: max(x, 0) (torch.nn.ReLU); derivative 1 for x > 0, else 0 (torch's choice at 0). Kinked:
// the structural analysis treats its units' switching apart.
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

template <class S>
MatT<S> relu_f(const MatT<S>& x) {
  return x.cwiseMax(S(0));
}
Mat relu_d(const Mat& x) {
  return x.unaryExpr([](double v) { return v > 0 ? 1.0 : 0.0; });
}
constexpr Activation kRelu{"relu", relu_f<float>, relu_f<double>, relu_d, /*kinked=*/true};

void compile(CompileContext& ctx) { compile_activation(ctx, kRelu); }

std::string torch(const LayerNode&, TorchNeeds&) { return "nn.ReLU()"; }

}  // namespace

extern const LayerKind relu{LayerType::relu, "relu", "Rectified linear unit, max(x, 0).",
                            {}, nullptr, nullptr, nullptr, compile, explain_nonlinearity};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter relu_torch = torch;

}  // namespace biaslab::kinds
