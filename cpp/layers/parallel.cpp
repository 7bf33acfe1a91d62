// parallel: x + branch_0(x) + branch_1(x) + ... (GPT-J, Pythia's parallel residual, Falcon,
// PaLM). Compiles to a residual_begin marker, each branch's ops with a branch_next marker between
// two branches, and a residual_end marker; the forward and JVP drivers keep the block's input and
// the running sum (model/forward.cpp, model/jvp.cpp).
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

constexpr LayerOption kOptions[] = {
    {layer_lists("branches", 1,
                 "Lists of layers, each reading the block's input; the block computes x plus the "
                 "sum of the branches' outputs."),
     &LayerConfig::branches},
};

void compile(CompileContext& ctx) {
  const int at = ctx.next();
  Op begin = ctx.op(OpKind::residual_begin);
  begin.parallel = true;
  ctx.emit(begin);
  std::vector<int> nexts;
  const size_t n = ctx.node().branches.size();
  for (size_t b = 0; b < n; ++b) {
    ctx.branch(b);
    if (b + 1 < n) {
      nexts.push_back(ctx.next());
      ctx.emit(ctx.op(OpKind::branch_next));
    }
  }
  Op end = ctx.op(OpKind::residual_end);
  end.partner = at;
  end.parallel = true;
  const int end_at = ctx.next();
  ctx.at(at).partner = end_at;
  for (int i : nexts) ctx.at(i).partner = end_at;
  ctx.emit(end);
}

std::string explain(const Op&, int k) {
  return k > 0 ? "feeds a residual stream whose readers cancel part of it"
               : "feeds a parallel block: its skip and every branch";
}

}  // namespace

extern const LayerKind parallel{LayerType::parallel, "parallel",
                                "Parallel residual block computing x + the sum of its branches applied to x.",
                                kOptions, nullptr, nullptr, nullptr, compile, explain};

// The exporter writes it around its branches (export/torch_export.cpp).
extern const TorchWriter parallel_torch = nullptr;

}  // namespace biaslab::kinds
