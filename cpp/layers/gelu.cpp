// gelu: x Phi(x) (torch.nn.GELU), exact (erf) or with the tanh approximation; each form's
// value and derivative share their constants here.
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;   // sqrt(2 / pi)
constexpr double kCubic = 0.044715;                  // the tanh form's cubic coefficient
constexpr double kInvSqrt2 = 0.7071067811865476;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1 / sqrt(2 pi), the normal pdf at 0

template <class S>
MatT<S> gelu_erf(const MatT<S>& x) {
  return x.unaryExpr([](S v) { return S(0.5) * v * (S(1) + std::erf(v * S(kInvSqrt2))); });
}
Mat gelu_erf_d(const Mat& x) {
  return x.unaryExpr([](double v) {
    return 0.5 * (1 + std::erf(v * kInvSqrt2)) + v * (kInvSqrt2Pi * std::exp(-0.5 * v * v));
  });
}

template <class S>
MatT<S> gelu_tanh(const MatT<S>& x) {
  return x.unaryExpr([](S v) {
    return S(0.5) * v * (S(1) + std::tanh(S(kSqrt2OverPi) * (v + S(kCubic) * v * v * v)));
  });
}
Mat gelu_tanh_d(const Mat& x) {
  return x.unaryExpr([](double v) {
    const double t = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kCubic * v * v);
  });
}

constexpr Activation kGeluErf{"gelu", gelu_erf<float>, gelu_erf<double>, gelu_erf_d, false};
constexpr Activation kGeluTanh{"gelu_tanh", gelu_tanh<float>, gelu_tanh<double>, gelu_tanh_d, false};

constexpr const char* kApprox[] = {"none", "tanh", nullptr};
constexpr LayerOption kOptions[] = {
    {choice("approximate", kApprox, 0, "none uses the exact erf form, tanh the tanh approximation."),
     &LayerConfig::approximate},
};

void compile(CompileContext& ctx) {
  compile_activation(ctx, ctx.cfg().approximate == GeluApprox::tanh ? kGeluTanh : kGeluErf);
}

std::string torch(const LayerNode& n, TorchNeeds&) {
  return std::string("nn.GELU(approximate=\"") + (n.cfg.approximate == GeluApprox::tanh ? "tanh" : "none") + "\")";
}

}  // namespace

const Activation& gelu_activation(bool tanh) { return tanh ? kGeluTanh : kGeluErf; }

extern const LayerKind gelu{LayerType::gelu, "gelu", "Gaussian error linear unit (torch.nn.GELU).",
                            kOptions, nullptr, nullptr, nullptr, compile, explain_nonlinearity};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter gelu_torch = torch;

}  // namespace biaslab::kinds
