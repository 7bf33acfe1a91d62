// Forward passes, in the config's dtype (S = float or double).
//
// Semantics follow PyTorch: LayerNorm/RMSNorm per token over features; BatchNorm1d per feature
// over batch and tokens (biased variance in train mode, running statistics in eval mode);
// InstanceNorm1d per sample and feature over tokens; GroupNorm per sample over tokens and the
// features of each group; attention with q/k/v/o projections, scores scaled by 1/sqrt(d),
// optional causal mask, and RoPE (half-split rotation, base 10000, position = token index)
// applied to q and k after their projections.
#pragma once

#include <algorithm>
#include <vector>

#include "layers/attention.hpp"
#include "layers/ops.hpp"
#include "model/model.hpp"

namespace biaslab {

struct Trace {
  std::vector<Mat> inputs;             // inputs[i]: input of op i, (N, op.in)
  Mat context;                         // cross-attention's context, (B * context_tokens, F); empty: none
  std::vector<AttentionCache> attention;  // indexed by op; empty for non-attention ops
  Mat output;                          // the model's output, (N, F_out)
};

// x: (N, F), followed by the context's rows when the model has one (draw_input).
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
  MatT<S> context;  // the cross-attention context (empty: none)
};

template <class S>
MatT<S> forward_recording(const Model& m, const Weights<S>& w, const MatT<S>& x, Recording<S>& rec);

// Resumes a forward pass at op `start` (ops before it are unchanged, e.g. when only a parameter
// of op `start` or later differs). When `ov` replaces a bias of op `start` its recorded products
// are reused. Equal to forward() bit for bit.
template <class S>
MatT<S> forward_from(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                     Override<S> ov = {});

// The forward passes from op `start` on for several values of its parameter `param` (each one
// forward_from with that value), stacked: op `start` runs once per value on the recorded input,
// and the ops after it take the K results' rows as one batch of K times the model's samples, so
// each product runs once over K times the rows. Equal to forward_from up to rounding (a product's
// blocking may follow its size). Empty where an op after `start` mixes samples (BatchNorm in
// train mode) or another op reads `param`.
template <class S>
std::vector<MatT<S>> forward_from_stacked(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                                          int param, const std::vector<const MatT<S>*>& values);

// Single ops, exposed for the invariance probes and tests. x: (N, in).
// `pre`: the op's products before biases, reused instead of recomputed; `products`: filled with
// them (see Recording). `context`: what a cross-attention op's keys and values read. `batch`:
// the samples x holds (0: the model's).
template <class S>
MatT<S> op_forward(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& x,
                   Override<S> ov = {}, AttentionCache* cache = nullptr,
                   const std::vector<MatT<S>>* pre = nullptr, std::vector<MatT<S>>* products = nullptr,
                   const MatT<S>* context = nullptr, int batch = 0);

// Rows [first, first + n) of a row-major matrix, copied as one contiguous range (no Eigen
// expression: this keeps the page's engine small).
template <class S>
MatT<S> row_range(const MatT<S>& x, Eigen::Index first, Eigen::Index n) {
  MatT<S> y(n, x.cols());
  std::copy(x.data() + first * x.cols(), x.data() + (first + n) * x.cols(), y.data());
  return y;
}
// The input rows of x (N of them) and the context rows after them.
template <class S>
MatT<S> input_rows(const Model& m, const MatT<S>& x) { return row_range(x, 0, x.rows() - m.context_rows()); }
template <class S>
MatT<S> context_rows(const Model& m, const MatT<S>& x) {
  return row_range(x, x.rows() - m.context_rows(), m.context_rows());
}

}  // namespace biaslab
