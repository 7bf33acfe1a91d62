// The op vocabulary that layer kinds compile to (OpKind in model/model.hpp), and what their
// forward passes share: weights in a dtype, one-parameter overrides, the affine map, softmax
// rows and activations. Shape letters as in model/model.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/model.hpp"

namespace biaslab {

// Model::params values in dtype S, same order: a cast of them (cast_weights), or for float64 the
// model's own matrices (model_weights), not a copy (a block of 44 M parameters is 352 MB a copy).
template <class S>
class Weights {
 public:
  Weights() = default;
  // (not inlined: the page's first-load engine counts the bytes of every copy)
  [[gnu::noinline]] explicit Weights(std::vector<MatT<S>> own) : own_(std::move(own)), at_(own_.size()) {
    for (size_t i = 0; i < own_.size(); ++i) at_[i] = &own_[i];
  }
  [[gnu::noinline]] explicit Weights(std::vector<const MatT<S>*> at) : at_(std::move(at)) {}
  // (moving a vector keeps its elements where they are, so at_ stays valid; a copy would not)
  Weights(Weights&&) noexcept = default;
  Weights& operator=(Weights&&) noexcept = default;
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;
  const MatT<S>& operator[](size_t i) const { return *at_[i]; }
  size_t size() const { return at_.size(); }
  bool empty() const { return at_.empty(); }

 private:
  std::vector<MatT<S>> own_;
  std::vector<const MatT<S>*> at_;
};

template <class S>
[[gnu::noinline]] Weights<S> cast_weights(const Model& m) {
  std::vector<MatT<S>> w;
  w.reserve(m.params.size());
  for (const auto& p : m.params) w.push_back(p.value.template cast<S>());
  return Weights<S>(std::move(w));
}

// The model's float64 values themselves: valid while the model is, and it sees their changes.
[[gnu::noinline]] inline Weights<double> model_weights(const Model& m) {
  std::vector<const Mat*> at(m.params.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = &m.params[i].value;
  return Weights<double>(std::move(at));
}

// One parameter replaced (for perturbations) without copying the rest.
template <class S>
struct Override {
  int index = -1;
  const MatT<S>* value = nullptr;
};

template <class S>
const MatT<S>& param(const Weights<S>& w, Override<S> ov, int i) {
  return i == ov.index ? *ov.value : w[i];
}

// What the JVP needs from an attention op's float64 forward.
struct AttentionCache {
  Mat q, k, v;             // (N, F), after bias and RoPE
  std::vector<Mat> probs;  // [b * H + h]: (T, T) softmax rows
  std::vector<Vec> sink;   // with sinks, [b * H + h]: (T) each row's weight on its head's sink
  Mat q_pre, k_pre;        // with qk_norm: q and k before their per-head norm
};

// y = x W^T + b. x: (N, in), W: (out, in), b: (out, 1) or absent. `pre`: x W^T already
// computed; `product`: receives x W^T.
template <class S>
MatT<S> linear(const MatT<S>& x, const MatT<S>& W, const MatT<S>* b, const MatT<S>* pre = nullptr,
               MatT<S>* product = nullptr) {
  MatT<S> y = pre ? *pre : MatT<S>(x * W.transpose());
  if (product) *product = y;
  if (b) y.rowwise() += b->col(0).transpose();
  return y;
}

// The position op (pos_embedding): token t of each sample (row r of x, t = r % T) gets row t of
// the table, which is held flat as (T * F, 1) in torch's row-major (T, F) order.
template <class S>
MatT<S> add_positions(const MatT<S>& x, const MatT<S>& table, int T) {
  MatT<S> y = x;
  const Eigen::Index N = x.rows(), F = x.cols();
  for (Eigen::Index f = 0; f < F; ++f)
    for (Eigen::Index r = 0; r < N; ++r) y(r, f) += table((r % T) * F + f, 0);
  return y;
}

// Row-wise softmax in place, max-subtracted. With `causal`, row i keeps only columns j <= i
// (the others are masked and get exactly 0). A finite `sink` is one more logit in every row that
// takes part in the normalisation and is then dropped (attention sinks: Hugging Face gpt-oss
// concatenates it after the mask and removes it after the softmax); `share` receives each row's
// weight on it. Without a sink (-infinity) it adds exp(-inf) = 0: the same results bit for bit.
// Plain loops: a row's result depends on its values only, never on its position in memory (token
// permutations stay bit-exact).
template <class S, class Rows>
void softmax_rows(Rows&& z, bool causal = false, S sink = -std::numeric_limits<S>::infinity(),
                  Vec* share = nullptr) {
  const Eigen::Index cols = z.cols();
  if (share) share->resize(z.rows());
  for (Eigen::Index i = 0; i < z.rows(); ++i) {
    const Eigen::Index len = causal ? std::min(i + 1, cols) : cols;
    S mx = sink;
    for (Eigen::Index j = 0; j < len; ++j) mx = std::max(mx, z(i, j));
    const S e_sink = std::exp(sink - mx);
    S sum = e_sink;
    for (Eigen::Index j = 0; j < len; ++j) {
      const S e = std::exp(z(i, j) - mx);
      z(i, j) = e;
      sum += e;
    }
    for (Eigen::Index j = 0; j < len; ++j) z(i, j) /= sum;
    for (Eigen::Index j = len; j < cols; ++j) z(i, j) = 0;
    if (share) (*share)(i) = static_cast<double>(e_sink / sum);
  }
}

// The softmax op (softmax.cpp): y = softmax_rows(x); the JVP for n directions dx: (n*N, F).
template <class S>
MatT<S> softmax_forward(const MatT<S>& x);
Mat softmax_jvp(const Mat& x, const Mat& dx, int n);

// An elementwise activation, defined in its kind's file: y = f(x) in float32 and float64, and
// f'(x) in float64 for the JVP. (N, F) -> (N, F).
struct Activation {
  const char* name;
  MatT<float> (*f32)(const MatT<float>& x);
  Mat (*f64)(const Mat& x);
  Mat (*derivative)(const Mat& x);
  // Piecewise linear with a kink (ReLU): the structure's sample can miss the region where a unit
  // switches, so its stopping rule treats such layers apart (analysis/structure.cpp).
  bool kinked;
};

template <class S>
MatT<S> activate(const Activation& a, const MatT<S>& x) {
  if constexpr (std::is_same_v<S, float>) return a.f32(x);
  else return a.f64(x);
}

}  // namespace biaslab
