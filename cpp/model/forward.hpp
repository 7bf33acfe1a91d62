// Forward passes, in the config's dtype (S = float or double).
//
// Semantics follow PyTorch: LayerNorm/RMSNorm per token over features; BatchNorm1d per feature
// over batch and tokens (biased variance in train mode, running statistics in eval mode);
// InstanceNorm1d per sample and feature over tokens; GroupNorm per sample over tokens and the
// features of each group; attention with q/k/v/o projections, scores scaled by 1/sqrt(d),
// optional causal mask, and RoPE (half-split rotation, base 10000, position = token index)
// applied to q and k after their projections.
#pragma once

#include <vector>

#include "model/model.hpp"

namespace biaslab {

template <class S>
using Weights = std::vector<MatT<S>>;  // Model::params values in dtype S, same order

template <class S>
Weights<S> cast_weights(const Model& m) {
  Weights<S> w;
  w.reserve(m.params.size());
  for (const auto& p : m.params) w.push_back(p.value.template cast<S>());
  return w;
}

// What the JVP needs from a float64 forward: the input of every op, and attention internals.
struct AttentionCache {
  Mat q, k, v;             // (N, F), after bias and RoPE
  std::vector<Mat> probs;  // [b * H + h]: (T, T) softmax rows
};
struct Trace {
  std::vector<Mat> inputs;             // inputs[i]: input of op i, (N, op.in)
  std::vector<AttentionCache> attention;  // indexed by op; empty for non-attention ops
  Mat output;                          // the model's output, (N, F_out)
};

// One parameter replaced (for perturbations) without copying the rest.
template <class S>
struct Override {
  int index = -1;
  const MatT<S>* value = nullptr;
};

template <class S>
MatT<S> forward(const Model& m, const Weights<S>& w, const MatT<S>& x, Override<S> ov = {},
                Trace* trace = nullptr);

// What a forward pass in dtype S leaves behind for restarting it part-way: the input of every op
// (inputs[ops.size()] is the output) and each op's products before its biases are added
// (linear: x W^T; attention: x Wq^T, x Wk^T, x Wv^T).
template <class S>
struct Recording {
  std::vector<MatT<S>> inputs;
  std::vector<std::vector<MatT<S>>> products;
};

template <class S>
MatT<S> forward_recording(const Model& m, const Weights<S>& w, const MatT<S>& x, Recording<S>& rec);

// Resumes a forward pass at op `start` (ops before it are unchanged, e.g. when only a parameter
// of op `start` or later differs). When `ov` replaces a bias of op `start` its recorded products
// are reused. Equal to forward() bit for bit.
template <class S>
MatT<S> forward_from(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                     Override<S> ov = {});

// Single ops, exposed for the invariance probes and tests. x: (N, in).
// `pre`: the op's products before biases, reused instead of recomputed; `products`: filled with
// them (see Recording).
template <class S>
MatT<S> op_forward(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& x,
                   Override<S> ov = {}, AttentionCache* cache = nullptr,
                   const std::vector<MatT<S>>* pre = nullptr, std::vector<MatT<S>>* products = nullptr);

// Attention with separate query and key/value sources (for permutation probes):
// xq: (B*Tq, F), xkv: (B*Tk, F); returns the context before o_proj, (B*Tq, F).
template <class S>
MatT<S> attention_core(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& xq,
                       const MatT<S>& xkv, int batch, AttentionCache* cache = nullptr,
                       Override<S> ov = {}, const std::vector<MatT<S>>* pre = nullptr,
                       std::vector<MatT<S>>* products = nullptr);

// In-place RoPE on (batch*tokens, F) rows (also used on tangents: the rotation is linear).
void rope_rotate(Mat& z, int batch, int tokens, int heads);

// RoPE angle tables for T positions and head dimension d: (T, d/2).
void rope_tables(int tokens, int head_dim, Mat& cos_t, Mat& sin_t);

}  // namespace biaslab
