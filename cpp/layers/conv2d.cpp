// conv2d: a zero-padded, stride-1 convolution over the image grid shape.grid (torch.nn.Conv2d on the
// features as channels). What conv1d and conv2d share: conv.cpp; the arithmetic: conv_kernel.cpp.
#include "layers/conv.hpp"

namespace biaslab::kinds {
namespace {

void compile(CompileContext& ctx) { conv_kind::compile(ctx, true); }
std::string torch(const LayerNode& n, TorchNeeds& needs) { return conv_kind::torch(n, needs, true); }

}  // namespace

extern const LayerKind conv2d{LayerType::conv2d, "conv2d",
                              "Zero-padded convolution over the image grid shape.grid, stride 1 (torch.nn.Conv2d).",
                              conv_kind::kOptions, conv_kind::check, conv_kind::out_width, conv_kind::params2d, compile,
                              conv_kind::explain, /*has_body=*/false, conv_kind::sync, &conv_kind::folds,
                              nullptr, nullptr, nullptr, /*needs_grid=*/true, conv_kind::shape2d};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter conv2d_torch = torch;

}  // namespace biaslab::kinds
