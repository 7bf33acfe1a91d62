// Attention (OpKind::attention): forward and JVP of the core (projections q, k, v, optional
// RoPE, scaled dot-product scores, softmax, causal mask; keys and values from a context in
// cross-attention); the output projection compiles to an
// ordinary linear op. The arithmetic is attention_kernel.cpp; the layer kind attention.cpp.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "layers/ops.hpp"
#include "model/tangent.hpp"

namespace biaslab {

// Attention with separate query and key/value sources (cross-attention's context, and the
// permutation probes): xq: (B*Tq, F), xkv: (B*Tk, its width); returns the context before o_proj,
// (B*Tq, F).
// `pre`: the products x Wq^T, x Wk^T, x Wv^T reused instead of recomputed; `products`: filled
// with them.
template <class S>
MatT<S> attention_core(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& xq,
                       const MatT<S>& xkv, int batch, AttentionCache* cache = nullptr,
                       Override<S> ov = {}, const std::vector<MatT<S>>* pre = nullptr,
                       std::vector<MatT<S>>* products = nullptr);

// In-place RoPE of op `op` on (batch*tokens, heads*d) rows, queries (heads = op.heads) or keys
// (op.kv_heads); also used on tangents, since the rotation is linear. In each head the first
// op.rotary_dim dimensions rotate, in pairs (i, i + r/2) or, with rope_interleaved, (2i, 2i + 1);
// the others pass.
void rope_rotate(Mat& z, int batch, int tokens, const Op& op, int heads);
// The same with every dimension rotating in (i, i + d/2) pairs, base 10000.
void rope_rotate(Mat& z, int batch, int tokens, int heads);

// RoPE angle tables for T positions and r rotating dimensions: (T, r/2), pair i at position t
// turning by t * base^(-2i/r).
void rope_tables(int tokens, int rotary_dim, Mat& cos_t, Mat& sin_t, double base = 10000.0);

// Tangent of the context (n*N, F) for n directions: dx is the input's tangent (or none), and
// a seed on q/k/v biases enters after the projections (before RoPE, as the biases do). With
// op.context (cross-attention) dx reaches q alone, and k and v have the context's B * op.context
// rows (a per-token seed on their biases too: seed_rows).
// x: the op's input (N, F); c: the float64 forward's cache. An empty matrix stands for tangents
// that are all exactly zero (a key bias's without sinks or RoPE: the softmax ignores it).
Mat attention_jvp(const Model& m, const Op& op, const Mat& x, const AttentionCache& c,
                  const jvp_detail::Tangent* dx, const Seed& seed, int n);

// attention_jvp for n broadcast directions of a q, k or v bias alone (no input tangent), without
// RoPE or qk_norm, block by block: emit(a, b, h, block) for each direction a, sample b and query
// head h whose (T, d) block of the output is not exactly zero (in order of b, then h), with
// attention_jvp's values there (every other entry is exactly zero). No (n * N, F) matrix is made:
// a direction reaches one head (a query bias) or a group's. Returns false, emitting nothing, where it does not apply.
bool attention_bias_blocks(const Model& m, const Op& op, const AttentionCache& c, const Seed& seed, int n,
                           const std::function<void(int a, int b, int h, const Mat& block)>& emit);

// A query bias's Jacobian at one query row of the attention's output, head by head: a move dq of
// head h's query moves its output by L K dq, where L = (V^T diag(p) - V^T p p^T) / sqrt(d) (d x
// Tk) and K the keys (Tk x d), p the row's weights on its head's keys (without sinks a softmax
// ignores the part of K dq that is the same for every key: rank at most Tk - 1; with them, at
// most Tk). With RoPE and qk_norm the query's move reaches the scores as R N dq (N the per-head
// norm's Jacobian at the row, R the row's rotation), so K is the keys (as the scores read them)
// times R N. Returned with as few columns of L (rows of K) as that allows: only the keys the row
// weighs (a causal mask's later keys weigh 0), and without sinks, whose weights sum to 1 (L 1 =
// 0), those keys' space less the direction of 1 (L Q and Q^T K, Q orthonormal): n - 1 columns
// for n keys. For the query bias `param` of op `op` (else nothing); `row` indexes the N query rows.
struct QueryFactors {
  Mat L, K;
};
// A key bias with RoPE (self-attention, no qk_norm) has the same L at each query row: a move dk of
// its key/value head moves query head h's scores at keys t by q_i^T R_t dk / sqrt(d), so its
// factor K holds the rows q_i^T R_t (R_t key t's rotation; q_i head h's query as the scores read
// it), and its heads' products add up on the d directions of their shared key head. (Without
// RoPE it moves every score of a row alike, which the softmax ignores.)
inline bool key_bias_factorable(const Op& op, int param) {
  return op.kind == OpKind::attention && param >= 0 && param == op.bk && op.rope && !op.qk_norm && op.context <= 0;
}
inline bool query_bias_factorable(const Op& op, int param) {
  return op.kind == OpKind::attention && param >= 0 && (param == op.bq || key_bias_factorable(op, param));
}
std::optional<std::vector<QueryFactors>> query_bias_factors(const Model& m, const Op& op, const AttentionCache& c,
                                                            int param, Eigen::Index row);

// The key/value heads of an attention config: num_kv_heads, or num_heads when it is 0 (unset).
inline int attention_kv_heads(const LayerConfig& c) { return c.num_kv_heads > 0 ? c.num_kv_heads : c.num_heads; }

// The (heads*d, kv_heads*d) 0/1 matrix that copies each key/value head to the query heads of its
// group (HF repeat_kv): the identity without grouping.
Mat repeat_kv_matrix(int heads, int kv_heads, int head_dim);

// Whether `param` is one of the q/k/v biases, the sinks or a qk_norm shift, which enter inside
// the op.
inline bool attention_takes_seed(const Op& op, int param) {
  return param >= 0 && (param == op.bq || param == op.bk || param == op.bv || param == op.sinks ||
                        param == op.qn_shift || param == op.kn_shift);
}

// qk_norm's eps, as Qwen3's q_norm and k_norm (rms_norm_eps = 1e-6).
constexpr double kQkNormEps = 1e-6;

}  // namespace biaslab
