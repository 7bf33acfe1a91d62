// The convolution op family (OpKind::conv) shared by conv1d and conv2d: a zero-padded, stride-1
// convolution over each sample's tokens laid out on a grid (conv1d: 1 x T; conv2d: shape.grid),
// with groups. Weights as torch's, (out, in / groups, kh, kw), held flat as
// (out, in / groups * kh * kw) in that order. x: (N, F) token-major, N = B*T.
#pragma once

#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace biaslab {

// y = conv(x) (+ b). `pre`: conv(x) already computed; `product`: receives conv(x).
template <class S>
MatT<S> conv_forward(const Op& op, const MatT<S>& W, const MatT<S>* b, const MatT<S>& x,
                     const MatT<S>* pre = nullptr, MatT<S>* product = nullptr);

// Whether this build carries conv_forward's arithmetic (conv_kernel.cpp); the page's first-load
// engine does not (cpp/wasm/conv_lean.cpp), and sends configs with a convolution elsewhere.
bool conv_kernel_linked();

// The padding before the first position along an axis with kernel k.
inline int conv_pad_before(const Op& op, int k) { return op.causal ? k - 1 : (k - 1) / 2; }

namespace conv_kind {
// The options, one table for both kinds (conv1d's grid is its tokens).
inline constexpr const char* kPaddings[] = {"same", "causal", nullptr};
inline constexpr LayerOption kOptions[] = {
    {integer("out_channels", 0, 1, Limits::max_features, "features", "Output width; omit it to keep the input width.",
             "the input width"),
     &LayerConfig::out_channels},
    {integer("kernel_size", 3, 1, 15, nullptr, "Kernel size (k, or k x k on a grid)."), &LayerConfig::kernel_size},
    {choice("padding", kPaddings, 0,
            "Zeros that keep the size: same puts (k - 1) / 2 before and the rest after (torch's padding=\"same\"); "
            "causal puts k - 1 before (rows above and columns to the left on a grid)."),
     &LayerConfig::padding},
    {integer("groups", 1, 1, Limits::max_features, nullptr,
             "Channel groups, in and out split alike; the input width makes it depthwise."),
     &LayerConfig::groups},
    {flag("bias", true, "Adds a learned bias per output channel."), &LayerConfig::bias},
};
// conv1d and conv2d differ in their grid and their torch class; `two_d` selects.
int out_width(const LayerConfig& c, int in);
std::optional<Error> check(const LayerConfig& c, int in, const std::string& path);
void params1d(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps);
void params2d(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps);
TorchShape shape1d(const LayerConfig& c, int in, int out, const std::string& local);
TorchShape shape2d(const LayerConfig& c, int in, int out, const std::string& local);
void compile(CompileContext& ctx, bool two_d);
std::string explain(const Op& at, int k);
void sync(LayerNode& n);
std::string torch(const LayerNode& n, TorchNeeds& needs, bool two_d);
extern const FoldTraits folds;
}  // namespace conv_kind

}  // namespace biaslab
