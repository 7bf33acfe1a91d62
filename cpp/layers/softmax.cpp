// softmax over the features of each token (torch.nn.Softmax(dim=-1)). Forward: softmax_rows
// (ops.hpp); JVP: dy = y * (dx - sum(y * dx)) per token.
#include "layers/layer.hpp"

namespace biaslab {

template <class S>
MatT<S> softmax_forward(const MatT<S>& x) {
  MatT<S> y = x;
  softmax_rows<S>(y);
  return y;
}
template MatT<float> softmax_forward<float>(const MatT<float>&);
template MatT<double> softmax_forward<double>(const MatT<double>&);

// x: (N, F) input, dx: (n*N, F).
Mat softmax_jvp(const Mat& x, const Mat& dx, int n) {
  const Eigen::Index N = x.rows();
  Mat y = x;
  for (Eigen::Index r = 0; r < N; ++r) {
    y.row(r).array() = (y.row(r).array() - y.row(r).maxCoeff()).exp();
    y.row(r) /= y.row(r).sum();
  }
  Mat dy(dx.rows(), dx.cols());
  for (int a = 0; a < n; ++a) {
    auto d = dx.middleRows(a * N, N);
    const Mat yd = y.cwiseProduct(d);
    const Vec s = yd.rowwise().sum();
    dy.middleRows(a * N, N) = yd - y.cwiseProduct(s.replicate(1, x.cols()));
  }
  return dy;
}

namespace kinds {
namespace {

void compile(CompileContext& ctx) { ctx.emit(ctx.op(OpKind::softmax)); }

std::string explain(const Op&, int) { return "softmax is shift invariant: the all-ones direction cancels"; }

std::string torch(const LayerNode&, TorchNeeds&) { return "nn.Softmax(dim=-1)"; }

// It cancels the mean of a vector added to its input (shift invariance).
int one_group(const LayerConfig&) { return 1; }
constexpr FoldTraits kFolds{{}, nullptr, nullptr, nullptr, nullptr, one_group};

}  // namespace

extern const LayerKind softmax{LayerType::softmax, "softmax", "Softmax over the features of each token.",
                               {}, nullptr, nullptr, nullptr, compile, explain,
                               /*has_body=*/false, nullptr, &kFolds};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter softmax_torch = torch;

}  // namespace kinds
}  // namespace biaslab
