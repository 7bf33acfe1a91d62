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

#include "layers/attention.hpp"
#include "layers/ops.hpp"
#include "model/model.hpp"

namespace biaslab {

struct Trace {
  std::vector<Mat> inputs;             // inputs[i]: input of op i, (N, op.in)
  std::vector<AttentionCache> attention;  // indexed by op; empty for non-attention ops
  Mat output;                          // the model's output, (N, F_out)
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

}  // namespace biaslab
