// The registry: every kind listed in kinds.def, in that order.
#include <cstdio>
#include <cstdlib>

#include "layers/layer.hpp"

namespace biaslab {

namespace kinds {
#define BIASLAB_LAYER(name) extern const LayerKind name;
#include "layers/kinds.def"
#undef BIASLAB_LAYER
}  // namespace kinds

namespace {
const LayerKind* const kRegistry[] = {
#define BIASLAB_LAYER(name) &kinds::name,
#include "layers/kinds.def"
#undef BIASLAB_LAYER
};
}  // namespace

const LayerKind& layer_kind(LayerType t) { return *kRegistry[static_cast<int>(t)]; }

const FoldTraits& fold_traits(LayerType t) {
  static const FoldTraits none{};
  const FoldTraits* f = layer_kind(t).folds;
  return f ? *f : none;
}

Items<const LayerKind*> layer_kinds() { return kRegistry; }

const LayerKind* find_layer_kind(const std::string& name) {
  for (const LayerKind* k : kRegistry)
    if (name == k->name) return k;
  return nullptr;
}

Op CompileContext::op(OpKind kind) const {
  Op op;
  op.kind = kind;
  op.in = node_.in_width;
  op.out = node_.out_width;
  op.layer = name_;
  op.layer_index = index_;
  op.layer_kind = &layer_kind(node_.cfg.type);
  return op;
}

int CompileContext::param(const std::string& local, int op_index) {
  const Param* p = node_.find(local);
  if (!p) return -1;
  m_.params.push_back({param_name(name_, local), p->role, op_index, m_.copy_values ? p->value : Mat(), p});
  return static_cast<int>(m_.params.size()) - 1;
}

void compile_activation(CompileContext& ctx, const Activation& act) {
  Op op = ctx.op(OpKind::activation);
  op.act = &act;
  ctx.emit(op);
}

std::string explain_nonlinearity(const Op&, int k) {
  return k > 0 ? "a nonlinearity follows: directions it never passes (inactive units) are lost"
               : "a nonlinearity follows: every direction changes the output";
}

// The shortest decimal that reads back as the same double (Python parses it identically).
std::string py_float(double v) {
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

const char* py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace biaslab
