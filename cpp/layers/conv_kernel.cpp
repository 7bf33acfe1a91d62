// What only an engine that runs convolutions needs (conv.hpp): the compile step, the arithmetic,
// the sentence about a bias that meets one. Its own file so that a build can leave it out: the
// page's first-load engine links cpp/wasm/conv_lean.cpp instead and hands a config with a
// convolution to the engine that has it (cpp/wasm/CMakeLists.txt).
#include "layers/conv.hpp"

namespace biaslab {

bool conv_kernel_linked() { return true; }

// For each kernel tap (i, j) and each output row h of the grid, the outputs (h, w) with
// 0 <= w + j - pw < W read input (h + i - ph, w + j - pw): a run of consecutive rows on both
// sides, so each tap is a few block copies and one product per group.
template <class S>
MatT<S> conv_forward(const Op& op, const MatT<S>& W, const MatT<S>* b, const MatT<S>& x, const MatT<S>* pre,
                     MatT<S>* product) {
  const int H = op.grid_h, Wd = op.grid_w, T = H * Wd;
  const int kh = op.kernel_h, kw = op.kernel_w, K = kh * kw;
  const int G = op.groups, cin = op.in / G, cout = op.out / G;
  const int ph = conv_pad_before(op, kh), pw = conv_pad_before(op, kw);
  const Eigen::Index R = x.rows(), samples = R / T;
  MatT<S> y;
  if (pre) {
    y = *pre;
  } else {
    y = MatT<S>::Zero(R, op.out);
    MatT<S> shifted(R, op.in), tap(op.out, cin);
    for (int i = 0; i < kh; ++i)
      for (int j = 0; j < kw; ++j) {
        const int dh = i - ph, dw = j - pw;
        const int w0 = std::max(0, -dw), w1 = std::min(Wd, Wd - dw);  // outputs w in [w0, w1)
        shifted.setZero();
        if (w1 > w0)
          for (Eigen::Index s = 0; s < samples; ++s)
            for (int h = std::max(0, -dh); h < std::min(H, H - dh); ++h)
              shifted.middleRows(s * T + h * Wd + w0, w1 - w0) = x.middleRows(s * T + (h + dh) * Wd + w0 + dw, w1 - w0);
        for (int c = 0; c < cin; ++c) tap.col(c) = W.col(c * K + i * kw + j);
        for (int g = 0; g < G; ++g)
          y.middleCols(g * cout, cout).noalias() +=
              shifted.middleCols(g * cin, cin) * tap.middleRows(g * cout, cout).transpose();
      }
  }
  if (product) *product = y;
  if (b) y.rowwise() += b->col(0).transpose();
  return y;
}

template MatT<float> conv_forward<float>(const Op&, const MatT<float>&, const MatT<float>*, const MatT<float>&,
                                         const MatT<float>*, MatT<float>*);
template MatT<double> conv_forward<double>(const Op&, const Mat&, const Mat*, const Mat&, const Mat*, Mat*);

namespace conv_kind {

void compile(CompileContext& ctx, bool two_d) {
  const LayerConfig& c = ctx.cfg();
  const Model& m = ctx.model();
  Op op = ctx.op(OpKind::conv);
  op.kernel_w = c.kernel_size;
  op.kernel_h = two_d ? c.kernel_size : 1;
  op.grid_h = two_d ? m.grid_h : 1;
  op.grid_w = two_d ? m.grid_w : m.tokens;
  op.causal = c.padding == ConvPadding::causal;
  op.groups = c.groups;
  const int at = ctx.next();
  op.w = ctx.param("weight", at);
  op.b = ctx.param("bias", at);
  ctx.emit(op);
}

std::string explain(const Op& at, int k) {
  if (k == 0)
    return "a convolution follows: with zero padding the border tokens see only some of its taps, so every direction changes the output";
  return "a convolution follows: the directions it maps to zero at every position (each border sees only some taps) are lost";
}

void sync(LayerNode& n) {
  if (const Param* w = n.find("weight")) n.cfg.out_channels = static_cast<int>(w->value.rows());
}

}  // namespace conv_kind

}  // namespace biaslab
