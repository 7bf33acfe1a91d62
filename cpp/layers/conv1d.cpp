// conv1d: a zero-padded, stride-1 convolution over the tokens of each sequence (torch.nn.Conv1d on the
// features as channels). What conv1d and conv2d share: conv.cpp; the arithmetic: conv_kernel.cpp.
#include "layers/conv.hpp"

namespace biaslab::kinds {
namespace {

void compile(CompileContext& ctx) { conv_kind::compile(ctx, false); }
std::string torch(const LayerNode& n, TorchNeeds& needs) { return conv_kind::torch(n, needs, false); }

}  // namespace

extern const LayerKind conv1d{LayerType::conv1d, "conv1d",
                              "Zero-padded convolution over the tokens of each sequence, stride 1 (torch.nn.Conv1d).",
                              conv_kind::kOptions, conv_kind::check, conv_kind::out_width, conv_kind::params1d, compile,
                              conv_kind::explain, /*has_body=*/false, conv_kind::sync, &conv_kind::folds,
                              nullptr, nullptr, nullptr, /*needs_grid=*/false, conv_kind::shape1d};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter conv1d_torch = torch;

}  // namespace biaslab::kinds
