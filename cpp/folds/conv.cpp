// Fold rules of BatchNorm in eval mode (a fixed affine map per channel) with a neighbouring
// convolution: the Conv + BN fusion every deployment toolchain performs, and its mirror, which
// the zero padding makes inexact.
#include "folds/rules.hpp"

#include "core/cold.hpp"

namespace biaslab::folds_detail {

namespace {
bool is_conv(const Seq& s, int i) { return is(s, i, LayerType::conv1d) || is(s, i, LayerType::conv2d); }
}  // namespace

// --- Conv + BatchNorm(eval): W' = diag(s) W row by row, b' = s b + t. Exact: the padding sits
// before the convolution, and BatchNorm(eval) acts on each output channel alone.
bool match_conv_bn(const Seq& s, int i) { return is_conv(s, i) && is_bn(s, i + 1, BatchNormMode::eval); }

// --- BatchNorm(eval) + Conv: BN(x) = s x + t per channel, so conv(BN(x)) = conv'(x) + conv(t 1^T)
// with W' = W diag(s) on its input channels. Inside the grid conv(t 1^T) is the constant
// sum over taps W_tap t, which goes into the bias; at a border the zero padding drops the taps
// that fall outside, so there the fold is off unless the kernel is a single position.
bool match_bn_conv(const Seq& s, int i) { return is_bn(s, i, BatchNormMode::eval) && is_conv(s, i + 1); }

BIASLAB_COLD void apply_bn_conv(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  Vec sc, t;
  bn_scale_shift(s[i], sc, t);
  LayerNode& conv = s[i + 1];
  Mat& W = conv.find("weight")->value;  // (out, in / groups * taps), columns c * taps + tap
  const int groups = conv.cfg.groups, per_in = conv.in_width / groups, per_out = conv.out_width / groups;
  const int taps = static_cast<int>(W.cols()) / per_in;
  Vec b = conv.find("bias") ? col(conv, "bias") : Vec::Zero(W.rows());
  for (int o = 0; o < W.rows(); ++o)
    for (int c = 0; c < per_in; ++c) {
      const int channel = (o / per_out) * per_in + c;
      for (int k = 0; k < taps; ++k) {
        double& w = W(o, c * taps + k);
        b(o) += w * t(channel);
        w *= sc(channel);
      }
    }
  conv.cfg.bias = true;
  set_param(conv, "bias", ParamRole::bias, b);
  record_bn_merge(s, i, i + 1, prefix, out);
  // Without a shift (beta = s mu) the padding adds nothing to miss.
  if (taps > 1 && t.cwiseAbs().maxCoeff() > 0)
    out.inexact = "zero padding: at the border tokens the convolution sees only some of its taps, so the "
                  "BatchNorm shift it adds there is not the constant the bias now holds; at positions "
                  "that see every tap the fold is exact";
  s.erase(s.begin() + i);
}

}  // namespace biaslab::folds_detail
