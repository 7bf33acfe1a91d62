// Tangent batches for the forward-mode derivatives (model/jvp.hpp): n directions stacked as
// (n*N, F), or (n, F) while every token of a direction carries the same vector.
#pragma once

#include "model/model.hpp"

namespace biaslab {

struct Seed {
  int param = -1;          // index into Model::params (bias or shift)
  Mat values;              // (n*N, size of the parameter), or (n, size) when broadcast
  bool broadcast = false;  // the same vector for every token of a direction (a bias direction)
};

namespace jvp_detail {

// (n, F) broadcast rows -> (n*N, F): row a*N + r = row a.
inline Mat expand(const Mat& b, Eigen::Index N) {
  Mat out(b.rows() * N, b.cols());
  for (Eigen::Index a = 0; a < b.rows(); ++a) {
#ifndef __EMSCRIPTEN__
    // Natively row by row: Eigen's replicate with runtime factors divides an index for every
    // entry, which cost small analyses more than their norms did. (The page's first-load engine
    // counts its bytes, and in wasm the two forms analysed as fast.)
    for (Eigen::Index r = 0; r < N; ++r) out.row(a * N + r) = b.row(a);
#else
    out.middleRows(a * N, N) = b.row(a).replicate(N, 1);
#endif
  }
  return out;
}

// A tangent batch that may be in broadcast form.
struct Tangent {
  Mat v;
  bool broadcast = false;
  Mat dense(Eigen::Index N) const { return broadcast ? expand(v, N) : v; }
};

// a + b, staying broadcast when both are.
inline Tangent add(const Tangent& a, const Tangent& b, Eigen::Index N) {
  if (a.broadcast == b.broadcast) return {a.v + b.v, a.broadcast};
  return {a.dense(N) + b.dense(N), false};
}

}  // namespace jvp_detail

}  // namespace biaslab
