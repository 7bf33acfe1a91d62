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

// Whether `param` is the gate or up bias, which enter inside the op.
inline bool glu_takes_seed(const Op& op, int param) { return param >= 0 && (param == op.bg || param == op.bu); }

}  // namespace biaslab
