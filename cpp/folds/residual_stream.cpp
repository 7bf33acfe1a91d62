// Centring the writers of a residual stream (TransformerLens' center_writing_weights). A run of
// residual blocks whose bodies each begin with a LayerNorm, followed by a LayerNorm, is read only
// through LayerNorms: the blocks' first layers and the norm after the run. LayerNorm ignores a
// shift of each token by a constant, so every layer that writes into the stream (the layer before
// the run, and each body's last layer) may have the output of its projection centred,
// W <- W - 1 mean(W), b <- b - mean(b), and the model's output stays the same.
#include "core/cold.hpp"
#include "folds/rules.hpp"

namespace biaslab::folds_detail {

namespace {

// The end of the run of residual blocks starting at i (the index after its last block).
int run_end(const Seq& s, int i) {
  while (is(s, i, LayerType::residual)) ++i;
  return i;
}

// Whether `n` writes through a projection (a Linear, attention's o_proj, a GLU's down_proj).
const Projection* writer_of(const LayerNode& n) { return fold_traits(n.cfg.type).writes; }

// The rule's site: the layer writing into the stream before the run when there is one, else the
// run's first block. Returns the first block's index, or -1 when i is not a site.
int run_start(const Seq& s, int i) {
  if (traits(s, i).writes && is(s, i + 1, LayerType::residual)) return i + 1;
  if (is(s, i, LayerType::residual) && !is(s, i - 1, LayerType::residual) && !traits(s, i - 1).writes) return i;
  return -1;
}

}  // namespace

bool match_centre_writers(const Seq& s, int i) {
  const int start = run_start(s, i);
  if (start < 0) return false;
  const int end = run_end(s, start);
  if (!is(s, end, LayerType::layernorm)) return false;
  bool any = start > i;  // the writer before the run
  for (int b = start; b < end; ++b) {
    if (s[b].body.empty() || s[b].body.front().cfg.type != LayerType::layernorm) return false;
    any = any || writer_of(s[b].body.back());
  }
  return any;
}

BIASLAB_COLD void apply_centre_writers(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  auto centre = [&](LayerNode& w, const std::string& layer) {
    const std::string proj = writer_of(w)->prefix;
    Mat& W = w.find(proj + "weight")->value;
    W.rowwise() -= W.colwise().mean();
    const std::string weight = param_name(layer, proj + "weight");
    out.moves.push_back({weight, weight});
    out.dof_removed += static_cast<int>(W.cols());
    if (Param* b = w.find(proj + "bias")) {
      b->value.array() -= b->value.mean();
      const std::string bias = param_name(layer, proj + "bias");
      out.moves.push_back({bias, bias});
      out.dof_removed += 1;
    }
  };
  const int start = run_start(s, i);
  if (start > i) {
    out.layers.push_back(name_of(prefix, i));
    centre(s[i], name_of(prefix, i));
  }
  const int end = run_end(s, start);
  for (int b = start; b < end; ++b) {
    out.layers.push_back(name_of(prefix, b));
    Seq& body = s[b].body;
    if (!body.empty() && writer_of(body.back()))
      centre(body.back(), name_of(body_prefix(name_of(prefix, b)), static_cast<int>(body.size()) - 1));
  }
  out.layers.push_back(name_of(prefix, end));
}

}  // namespace biaslab::folds_detail
