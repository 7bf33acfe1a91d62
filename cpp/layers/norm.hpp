// The norm op family (OpKind::norm): LayerNorm, RMSNorm, BatchNorm (train and eval),
// GroupNorm and InstanceNorm, forward and JVP side by side. Which elements share statistics is
// written once, in norm_set(); the forward, the JVP and the invariance probes use it.
// x: (N, F) token-major, N = B*T.
#pragma once

#include <string>
#include <vector>

#include "layers/ops.hpp"

namespace biaslab {

// The set of element (r, f) of an (N, F) input: the elements normalised together. T tokens.
int norm_set(const Op& op, int r, int f, int T, int F);
// The number of sets of an (N, F) input with B sequences.
int norm_set_count(const Op& op, int N, int F, int T);
// Where the statistics are taken, in words ("per token", ...).
const char* norm_set_words(const Op& op);
// Whether the norm subtracts a mean (its output ignores a shift of each set), and whether it
// divides by a scale (it ignores a positive scale of each set, with eps = 0).
bool norm_centres(const Op& op);
bool norm_scales(const Op& op);

// y = gain * normalise(x) + shift. x: (N, F); B sequences of N / B tokens.
template <class S>
MatT<S> norm_forward(const Op& op, const Weights<S>& w, Override<S> ov, const MatT<S>& x, int B);

// Tangent of the output for n directions dx: (n*N, F) -> (n*N, F). x: the op's input.
Mat norm_jvp(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n);

// A per-token norm's (LayerNorm, RMSNorm) JVP at one token x (F values) as factors:
// dy = gain * r * (I - U U^T) dx, with U's columns 1 / sqrt(F) (a LayerNorm only) and the
// normalised token / sqrt(F). Returns r (1 / std, as the forward takes it); U gets 2 or 1 columns.
double token_norm_factors(const Op& op, const Eigen::Ref<const Eigen::RowVectorXd>& x, Mat* U);

// The affine parameters shared by the norm kinds: "weight" (a gain, U(0.5, 1.5)) and, with
// `shift`, "bias" (U(-0.5, 0.5)), both (F, 1).
struct ParamSpec;
void norm_affine_params(std::vector<ParamSpec>& ps, int in, bool shift);

// The compile step shared by the norm kinds: one norm op with the layer's weight, bias and
// running statistics (whichever it declares).
class CompileContext;
void compile_norm(CompileContext& ctx, NormKind kind);

}  // namespace biaslab
