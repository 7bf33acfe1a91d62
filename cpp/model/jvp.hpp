// Forward-mode derivatives (JVPs) in float64, batched over directions.
//
// A batch of n tangents is one (n*N, F) matrix: rows [a*N, (a+1)*N) hold direction a. While
// every token of a direction carries the same vector (a bias seed, through Linear, BatchNorm
// eval and residual adds) the batch is kept as (n, F), one row per direction, and expanded only
// where an op treats tokens differently. Seeds are
// added where a bias-like parameter enters the computation (after its projection, after its
// norm, inside attention for q/k/v biases); ops before that point carry an exact zero tangent
// and are skipped. Exact zeros are preserved (per-head blocks inside attention that receive no
// tangent stay 0.0), which the structural analysis uses to split its rank computation.
#pragma once

#include "model/forward.hpp"
#include "model/tangent.hpp"

namespace biaslab {

// Some of the N token rows, from op `at` on: the ops [at, stop) of a jvp() given it act on each
// token alone (no attention, convolution or norm over tokens), so the tangents of these rows
// need only these rows. The tangents (and the open blocks' skips) are cut down to `rows` when op
// `at` starts, and the result has rows.size() rows per direction; the seed must be broadcast (a
// per-token seed would need its rows too). `inputs` are the trace's
// inputs of ops at, at + 1, ... cut down the same way (made by take_rows).
struct TokenRows {
  int at = 0;
  std::vector<Eigen::Index> rows;  // ascending indices into the N rows
  std::vector<Mat> inputs;         // inputs[i - at]: rows `rows` of trace.inputs[i]
  // Optional: the ops [tail_at, stop) of the jvp() as one matrix per row, (*tail)[j] of shape
  // (width at stop, width at tail_at) (tail_jacobian). From op tail_at on, the tangent is that
  // map applied to the one entering there, instead of the ops one by one, when no open block's
  // skip carries a tangent past tail_at, tail_at comes after the seed's op, and the ops do not all
  // keep a broadcast tangent compact where jvp() is asked for that form (else the ops run as
  // usual). tail must hold one matrix per row.
  int tail_at = -1;
  const std::vector<Mat>* tail = nullptr;
};
// The rows of `trace` for ops [at, stop).
TokenRows take_rows(const Trace& trace, int at, int stop, std::vector<Eigen::Index> rows);
// Whether op `op` acts on each token alone, so that a tangent's rows can be taken before it.
bool acts_per_token(const Op& op);
// Whether a tangent that is the same on every token stays so through op `op` (jvp() then keeps
// its compact form): Linear, BatchNorm in eval mode, residual and branch markers, a position
// table (which adds nothing to a tangent).
bool keeps_broadcast(const Op& op);

// Propagates `seed` (n directions) from the op that holds the parameter up to the input of op
// `stop` (m.ops.size() for the model output). `trace` comes from forward<double> on the same
// model and input. Returns (n*N, width at stop).
// When `broadcast` is given and every token of a direction still carries the same vector at
// `stop` (no op on the way treated tokens differently), the compact (n, width) form is returned
// and *broadcast is set; the tangent then does not depend on the input at all.
Mat jvp(const Model& m, const Trace& trace, const Seed& seed, int n, int stop, bool* broadcast = nullptr,
        const TokenRows* rows = nullptr);

// The per-token Jacobian of ops [from, stop) at each of sub's rows (sub.at <= from <= stop):
// A[j] (width at stop, width at from) maps a tangent of row j entering op `from`, with no open
// block's skip carrying one, to its tangent at `stop`. Costs what the width at `from` of unit
// directions cost through those ops; pays off where several biases' tangents pass op `from`.
// The unit vectors go through `chunk` at a time (analysis/structure.hpp, chunk_directions).
std::vector<Mat> tail_jacobian(const Model& m, const Trace& trace, const TokenRows& sub, int from, int stop,
                               int chunk);

// Tangents `init` (n directions of sub's rows: row a * k + j is direction a at row j, (n * k, width
// at `from`)) entering op `from` (sub.at <= from <= stop, no open block's skip carrying one),
// taken through ops [from, stop): (n * k, width at stop).
Mat jvp_rows(const Model& m, const Trace& trace, const TokenRows& sub, int from, int stop, const Mat& init, int n);

// The rows of one direction of a per-token seed on `param` (Seed::values, not broadcast): the N
// input rows, or the context's B * context_tokens for the key/value side of cross-attention
// (k_proj.bias, v_proj.bias, k_norm.bias).
Eigen::Index seed_rows(const Model& m, int param, Eigen::Index N);

// Ops [cut, end) that act on a tangent entering at op `start` as one fixed linear map per token
// (Linear, BatchNorm in eval mode, residual markers whose skip carries no tangent). Returns the
// smallest such cut > start, or m.ops.size() when the last op is not of that kind.
int trailing_cut(const Model& m, int start);
// That map as a (width at end, width at cut) matrix A: output tangent = A * tangent at cut.
Mat trailing_map(const Model& m, int start, int cut);

// A single activation derivative or norm JVP, exposed for tests. x: (N, F) op input,
// dx: (n*N, F).
Mat op_jvp(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n);

}  // namespace biaslab
