// The gated feed-forward op (OpKind::glu): act(x W_gate^T + b_gate) * (x W_up^T + b_up), forward
// and JVP. The down projection compiles to an ordinary linear op. See glu.cpp for the layer kind.
#pragma once

#include <vector>

#include "layers/ops.hpp"
#include "model/tangent.hpp"

namespace biaslab {

// x: (N, F) -> (N, hidden). `pre`: the products x W_gate^T, x W_up^T reused instead of
// recomputed; `products`: filled with them.
template <class S>
MatT<S> glu_forward(const Op& op, const Weights<S>& w, Override<S> ov, const MatT<S>& x,
                    const std::vector<MatT<S>>* pre = nullptr, std::vector<MatT<S>>* products = nullptr);

// Tangent (n*N, hidden) for n directions: dx is the input's tangent (or none); a seed on the gate
// or up bias enters after its projection. x: the op's float64 input (N, F).
Mat glu_jvp(const Model& m, const Op& op, const Mat& x, const jvp_detail::Tangent* dx, const Seed& seed, int n);

// Directions from which a per-token tangent goes through the op token by token
// (glu_jvp_per_token): each token then reads both weights once to make its matrix, and the
// product costs half.
inline constexpr int kGluPerTokenDirections = 32;

// The same tangent for a dense dx (n*N, F) without a seed in the op, token by token (fewer
// flops where each token has many directions; only jvp.cpp outside the page's first-load engine
// calls it, so that engine's link leaves it out).
Mat glu_jvp_per_token(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n);

// Whether `param` is the gate or up bias, which enter inside the op.
inline bool glu_takes_seed(const Op& op, int param) { return param >= 0 && (param == op.bg || param == op.bu); }

}  // namespace biaslab
