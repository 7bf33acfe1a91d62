// pos_embedding: a learned table with one vector per position, added to the input,
// y[b, t] = x[b, t] + weight[t] (GPT-2's wpe read at positions 0..T-1, ViT's position
// embeddings). The table is a bias that differs per position: its row in the bias table has
// tokens x features directions. It is held flat, (T * F, 1) in row-major (T, F) order, with the
// torch shape (T, F); its op (OpKind::position) is add_positions (ops.hpp) and its tangent enters
// per token (model/jvp.cpp).
#include "layers/layer.hpp"

namespace biaslab::kinds {
namespace {

// weight (positions, features), drawn as a norm's shift, U(-0.5, 0.5): of the size of the
// input's own spread, so that what reads it sees it.
void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  ps.push_back({"weight", ParamRole::bias, c.positions * in, 1, Init::shift, in});
}

TorchShape torch_shape(const LayerConfig& c, int in, int, const std::string&) {
  TorchShape s;
  s.rank = 2;
  s.size[0] = c.positions;
  s.size[1] = in;
  return s;
}

void compile(CompileContext& ctx) {
  Op op = ctx.op(OpKind::position);
  op.b = ctx.param("weight", ctx.next());
  ctx.emit(op);
}

// The rules that centre a bias centre each of the table's rows.
constexpr FoldTraits kFolds{{}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "weight"};

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("pos_embedding");
  return "PositionEmbedding(" + std::to_string(n.cfg.positions) + ", " + std::to_string(n.in_width) + ")";
}

}  // namespace

extern const LayerKind pos_embedding{
    LayerType::pos_embedding, "pos_embedding",
    "A learned table of one vector per position added to the tokens, weight (tokens, features) "
    "(GPT-2's wpe, ViT's position embeddings).",
    {}, nullptr, nullptr, params, compile, nullptr, /*has_body=*/false, nullptr, &kFolds,
    nullptr, nullptr, nullptr, /*needs_grid=*/false, torch_shape};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter pos_embedding_torch = torch;

}  // namespace biaslab::kinds
