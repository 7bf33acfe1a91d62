// residual: x + body(x). Compiles to a begin marker, the body's ops and an end marker; the
// forward and JVP drivers keep the skip (model/forward.cpp, model/jvp.cpp).
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {layer_list("body", "The layers of the branch; the block computes x + body(x)."),
     &LayerConfig::body},
};

void compile(CompileContext& ctx) {
  const int at = ctx.next();
  ctx.emit(ctx.op(OpKind::residual_begin));
  ctx.body();
  Op end = ctx.op(OpKind::residual_end);
  end.partner = at;
  ctx.at(at).partner = ctx.next();
  ctx.emit(end);
}

// k > 0: the stream's readers cancel part of it (a LayerNorm at the start of every block and after
// them cancels its all-ones direction; centre_writers removes it).
std::string explain(const Op&, int k) {
  return k > 0 ? "feeds a residual stream whose readers cancel part of it" : "feeds a residual block";
}

}  // namespace

extern const LayerKind residual{LayerType::residual, "residual",
                                "Residual block computing x + body(x).",
                                kOptions, nullptr, nullptr, nullptr, compile, explain,
                                /*has_body=*/true};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter residual_torch = nullptr;

}  // namespace biaslab::kinds
