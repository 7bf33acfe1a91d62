// Centring the writers of a residual stream (TransformerLens' center_writing_weights). A run of
// residual and parallel blocks whose bodies and branches each begin with a LayerNorm, followed by
// a LayerNorm, is read only through LayerNorms: the first layers of the bodies and branches, and
// the norm after the run. LayerNorm ignores a shift of each token by a constant, so every layer
// that writes into the stream (the layer before the run, and each body's or branch's last layer)
// may have the output of its projection centred,
// W <- W - 1 mean(W), b <- b - mean(b), and the model's output stays the same. A position table
// (pos_embedding) writes into the stream too: each of its rows is centred.
#include "core/cold.hpp"
#include "folds/rules.hpp"

namespace biaslab::folds_detail {

namespace {

bool is_block(const Seq& s, int i) { return is(s, i, LayerType::residual) || is(s, i, LayerType::parallel); }

// The end of the run of blocks starting at i (the index after its last block).
int run_end(const Seq& s, int i) {
  while (is_block(s, i)) ++i;
  return i;
}

// Whether `n` writes through a projection (a Linear, attention's o_proj, a GLU's down_proj).
// A grouped convolution's rows cannot be centred: it is left out.
const Projection* writer_of(const LayerNode& n) { return centrable_writer(n); }

// A position table (pos_embedding) writes into the stream too: each of its rows is centred.
const char* table_of(const LayerNode& n) { return fold_traits(n.cfg.type).table; }
bool writes_stream(const LayerNode& n) { return writer_of(n) || table_of(n); }

// The rule's site: the layer writing into the stream before the run when there is one, else the
// run's first block. Returns the first block's index, or -1 when i is not a site.
int run_start(const Seq& s, int i) {
  if (i >= 0 && i < static_cast<int>(s.size()) && writes_stream(s[i]) && is_block(s, i + 1)) return i + 1;
  if (is_block(s, i) && !is_block(s, i - 1) && !(i > 0 && writes_stream(s[i - 1]))) return i;
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
    bool all_read_by_ln = true;
    for_each_sequence(s[b], "", [&](const Seq& seq, const std::string&, int) {
      if (seq.empty() || seq.front().cfg.type != LayerType::layernorm) all_read_by_ln = false;
      else any = any || writes_stream(seq.back());
    });
    if (!all_read_by_ln) return false;
  }
  return any;
}

BIASLAB_COLD void apply_centre_writers(Seq& s, int i, const std::string& prefix, FoldApplied& out) {
  auto centre = [&](LayerNode& w, const std::string& layer) {
    if (const char* table = table_of(w)) {
      Param* t = w.find(table);
      centre_table(t->value, w.cfg.positions, 1, true);
      const std::string name = param_name(layer, table);
      out.moves.push_back({name, name});
      out.dof_removed += w.cfg.positions;
      return;
    }
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
    for_each_sequence(s[b], name_of(prefix, b), [&](Seq& seq, const std::string& seq_prefix, int) {
      if (!seq.empty() && writes_stream(seq.back()))
        centre(seq.back(), name_of(seq_prefix, static_cast<int>(seq.size()) - 1));
    });
  }
  out.layers.push_back(name_of(prefix, end));
}

}  // namespace biaslab::folds_detail
