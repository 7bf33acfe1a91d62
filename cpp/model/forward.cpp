#include "model/forward.hpp"

#include <algorithm>
#include <cmath>

namespace biaslab {

namespace {

template <class S>
const MatT<S>& param(const Weights<S>& w, Override<S> ov, int i) {
  return i == ov.index ? *ov.value : w[i];
}

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

// Normalises x over one set of elements in place: (x - mean) / sqrt(var + eps), or for RMSNorm
// x / sqrt(mean(x^2) + eps). `at(k)` visits the k-th element of the set.
template <class S, class At>
void normalise_set(int count, S eps, bool centre, At at) {
  // The mean relative to the first element: exact for a constant set (as torch's Welford
  // update), where sum / count can miss by an ulp that 1 / sqrt(eps) then magnifies.
  S mean = 0;
  if (centre) {
    const S x0 = at(0);
    for (int k = 0; k < count; ++k) mean += at(k) - x0;
    mean = x0 + mean / S(count);
  }
  S var = 0;
  for (int k = 0; k < count; ++k) {
    const S c = at(k) - mean;
    var += c * c;
  }
  var /= S(count);  // biased, as torch's normalisation layers
  // var + eps is 0 only for a constant set with eps = 0 (the invariance probes use eps = 0);
  // the eps -> 0+ limit of the normalised values is then 0.
  const S denom = var + eps;
  const S rstd = denom > S(0) ? S(1) / std::sqrt(denom) : S(0);
  for (int k = 0; k < count; ++k) at(k) = (at(k) - mean) * rstd;
}

template <class S>
MatT<S> norm(const Op& op, const Weights<S>& w, Override<S> ov, const MatT<S>& x, int B, int T) {
  const int N = static_cast<int>(x.rows()), F = static_cast<int>(x.cols());
  const S eps = S(op.eps);
  MatT<S> y = x;
  switch (op.norm) {
    case NormKind::layer:
    case NormKind::rms:
      for (int r = 0; r < N; ++r)
        normalise_set<S>(F, eps, op.norm == NormKind::layer, [&](int k) -> S& { return y(r, k); });
      break;
    case NormKind::batch_train:
      for (int f = 0; f < F; ++f)
        normalise_set<S>(N, eps, true, [&](int k) -> S& { return y(k, f); });
      break;
    case NormKind::batch_eval: {
      const MatT<S>& rm = param(w, ov, op.mean);
      const MatT<S>& rv = param(w, ov, op.var);
      for (int f = 0; f < F; ++f) {
        const S rstd = S(1) / std::sqrt(rv(f, 0) + eps);
        for (int r = 0; r < N; ++r) y(r, f) = (x(r, f) - rm(f, 0)) * rstd;
      }
      break;
    }
    case NormKind::instance:
      for (int b = 0; b < B; ++b)
        for (int f = 0; f < F; ++f)
          normalise_set<S>(T, eps, true, [&](int k) -> S& { return y(b * T + k, f); });
      break;
    case NormKind::group: {
      const int per = F / op.groups;
      for (int b = 0; b < B; ++b)
        for (int g = 0; g < op.groups; ++g)
          normalise_set<S>(T * per, eps, true,
                           [&](int k) -> S& { return y(b * T + k / per, g * per + k % per); });
      break;
    }
  }
  if (op.gain >= 0) y.array().rowwise() *= param(w, ov, op.gain).col(0).transpose().array();
  if (op.shift >= 0) y.rowwise() += param(w, ov, op.shift).col(0).transpose();
  return y;
}

template <class S>
S gelu(S x, GeluApprox approx) {
  if (approx == GeluApprox::tanh) {
    const S c = S(0.7978845608028654);  // sqrt(2 / pi)
    return S(0.5) * x * (S(1) + std::tanh(c * (x + S(0.044715) * x * x * x)));
  }
  return S(0.5) * x * (S(1) + std::erf(x * S(0.7071067811865476)));
}

// Row-wise softmax in place, max-subtracted. With `causal`, row i keeps only columns j <= i
// (the others are masked and get exactly 0). Plain loops: a row's result depends on its values
// only, never on its position in memory (token permutations stay bit-exact).
template <class S, class Rows>
void softmax_rows(Rows&& z, bool causal = false) {
  const Eigen::Index cols = z.cols();
  for (Eigen::Index i = 0; i < z.rows(); ++i) {
    const Eigen::Index len = causal ? std::min(i + 1, cols) : cols;
    S mx = z(i, 0);
    for (Eigen::Index j = 1; j < len; ++j) mx = std::max(mx, z(i, j));
    S sum = 0;
    for (Eigen::Index j = 0; j < len; ++j) {
      const S e = std::exp(z(i, j) - mx);
      z(i, j) = e;
      sum += e;
    }
    for (Eigen::Index j = 0; j < len; ++j) z(i, j) /= sum;
    for (Eigen::Index j = len; j < cols; ++j) z(i, j) = 0;
  }
}

// In-place RoPE on (B*T, F) rows, per head: pairs (i, i + d/2) rotate by t * 10000^(-2i/d).
template <class S>
void apply_rope(MatT<S>& z, int batch, int tokens, int heads) {
  const int d = static_cast<int>(z.cols()) / heads, half = d / 2;
  Mat c, s;
  rope_tables(tokens, d, c, s);
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          S& a = z(b * tokens + t, h * d + i);
          S& e = z(b * tokens + t, h * d + half + i);
          const S ct = S(c(t, i)), st = S(s(t, i));
          const S a0 = a, e0 = e;
          a = a0 * ct - e0 * st;
          e = e0 * ct + a0 * st;
        }
}

}  // namespace

void rope_rotate(Mat& z, int batch, int tokens, int heads) { apply_rope<double>(z, batch, tokens, heads); }

void rope_tables(int tokens, int head_dim, Mat& cos_t, Mat& sin_t) {
  const int half = head_dim / 2;
  cos_t.resize(tokens, half);
  sin_t.resize(tokens, half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(10000.0, -2.0 * i / head_dim);
    for (int t = 0; t < tokens; ++t) {
      cos_t(t, i) = std::cos(t * inv_freq);
      sin_t(t, i) = std::sin(t * inv_freq);
    }
  }
}

template <class S>
MatT<S> attention_core(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& xq,
                       const MatT<S>& xkv, int batch, AttentionCache* cache, Override<S> ov,
                       const std::vector<MatT<S>>* pre, std::vector<MatT<S>>* products) {
  auto opt = [&](int i) { return i >= 0 ? &param(w, ov, i) : nullptr; };
  const int F = op.in, H = op.heads, d = F / H;
  const int Tq = static_cast<int>(xq.rows()) / batch, Tk = static_cast<int>(xkv.rows()) / batch;
  if (products) products->assign(3, MatT<S>());
  auto pre_i = [&](int i) { return pre ? &(*pre)[i] : nullptr; };
  auto out_i = [&](int i) { return products ? &(*products)[i] : nullptr; };
  MatT<S> q = linear<S>(xq, param(w, ov, op.wq), opt(op.bq), pre_i(0), out_i(0));
  MatT<S> k = linear<S>(xkv, param(w, ov, op.wk), opt(op.bk), pre_i(1), out_i(1));
  MatT<S> v = linear<S>(xkv, param(w, ov, op.wv), opt(op.bv), pre_i(2), out_i(2));
  if (op.rope) {
    apply_rope(q, batch, Tq, H);
    apply_rope(k, batch, Tk, H);
  }
  const S scale = S(1) / std::sqrt(S(d));
  MatT<S> ctx(xq.rows(), F);
  MatT<S> scores(Tq, Tk);
  if (cache) cache->probs.assign(static_cast<size_t>(batch) * H, Mat());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < H; ++h) {
      auto qb = q.block(b * Tq, h * d, Tq, d);
      auto kb = k.block(b * Tk, h * d, Tk, d);
      scores.noalias() = (qb * kb.transpose()) * scale;
      softmax_rows<S>(scores, op.causal);  // causal: query i sees keys j <= i
      ctx.block(b * Tq, h * d, Tq, d).noalias() = scores * v.block(b * Tk, h * d, Tk, d);
      if (cache) cache->probs[b * H + h] = scores.template cast<double>();
    }
  if (cache) {
    cache->q = q.template cast<double>();
    cache->k = k.template cast<double>();
    cache->v = v.template cast<double>();
  }
  return ctx;
}

template <class S>
MatT<S> op_forward(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& x,
                   Override<S> ov, AttentionCache* cache, const std::vector<MatT<S>>* pre,
                   std::vector<MatT<S>>* products) {
  switch (op.kind) {
    case OpKind::linear:
      if (products) products->assign(1, MatT<S>());
      return linear<S>(x, param(w, ov, op.w), op.b >= 0 ? &param(w, ov, op.b) : nullptr,
                       pre ? &(*pre)[0] : nullptr, products ? &(*products)[0] : nullptr);
    case OpKind::norm:
      return norm<S>(op, w, ov, x, m.batch, static_cast<int>(x.rows()) / m.batch);
    case OpKind::activation:
      if (op.act == LayerType::relu) return x.cwiseMax(S(0));
      return x.unaryExpr([&](S v) { return gelu(v, op.approx); });
    case OpKind::softmax: {
      MatT<S> y = x;
      softmax_rows<S>(y);
      return y;
    }
    case OpKind::attention:
      return attention_core<S>(m, op, w, x, x, m.batch, cache, ov, pre, products);
    case OpKind::residual_begin:
    case OpKind::residual_end:
      return x;
  }
  return x;
}

namespace {

// Runs ops [start, end) on h with the residual stack `skips`.
template <class S>
MatT<S> run_ops(const Model& m, const Weights<S>& w, MatT<S> h, std::vector<MatT<S>> skips, int start,
                Override<S> ov, Trace* trace, Recording<S>* record,
                const std::vector<MatT<S>>* start_products = nullptr) {
  for (size_t i = start; i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    if (trace) trace->inputs[i] = h.template cast<double>();
    if (record) record->inputs[i] = h;
    switch (op.kind) {
      case OpKind::residual_begin:
        skips.push_back(h);
        break;
      case OpKind::residual_end:
        h += skips.back();
        skips.pop_back();
        break;
      default:
        h = op_forward<S>(m, op, w, h, ov, trace ? &trace->attention[i] : nullptr,
                          static_cast<int>(i) == start ? start_products : nullptr,
                          record ? &record->products[i] : nullptr);
    }
  }
  return h;
}

}  // namespace

template <class S>
MatT<S> forward(const Model& m, const Weights<S>& w, const MatT<S>& x, Override<S> ov, Trace* trace) {
  if (trace) {
    trace->inputs.assign(m.ops.size(), Mat());
    trace->attention.assign(m.ops.size(), AttentionCache());
  }
  MatT<S> y = run_ops<S>(m, w, x, {}, 0, ov, trace, nullptr);
  if (trace) trace->output = y.template cast<double>();
  return y;
}

template <class S>
MatT<S> forward_recording(const Model& m, const Weights<S>& w, const MatT<S>& x, Recording<S>& rec) {
  rec.inputs.assign(m.ops.size() + 1, MatT<S>());
  rec.products.assign(m.ops.size(), {});
  MatT<S> y = run_ops<S>(m, w, x, {}, 0, {}, nullptr, &rec);
  rec.inputs.back() = y;
  return y;
}

template <class S>
MatT<S> forward_from(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                     Override<S> ov) {
  // The skips still open at `start`: the inputs of residual begins before it whose end is not.
  std::vector<MatT<S>> skips;
  for (int i = 0; i < start; ++i)
    if (m.ops[i].kind == OpKind::residual_begin && m.ops[i].partner >= start) skips.push_back(rec.inputs[i]);
  // The start op's products before biases still hold unless a weight of it is replaced.
  const Op& op = m.ops[start];
  const bool weight_replaced = ov.index >= 0 && (ov.index == op.w || ov.index == op.wq ||
                                                 ov.index == op.wk || ov.index == op.wv);
  const std::vector<MatT<S>>* pre =
      !weight_replaced && !rec.products[start].empty() ? &rec.products[start] : nullptr;
  return run_ops<S>(m, w, rec.inputs[start], std::move(skips), start, ov, nullptr, nullptr, pre);
}

#define BIASLAB_INSTANTIATE(S)                                                                 \
  template MatT<S> forward<S>(const Model&, const Weights<S>&, const MatT<S>&, Override<S>,     \
                              Trace*);                                                          \
  template MatT<S> forward_recording<S>(const Model&, const Weights<S>&, const MatT<S>&,        \
                                        Recording<S>&);                                         \
  template MatT<S> forward_from<S>(const Model&, const Weights<S>&, const Recording<S>&, int,    \
                                   Override<S>);                                                \
  template MatT<S> op_forward<S>(const Model&, const Op&, const Weights<S>&, const MatT<S>&,    \
                                 Override<S>, AttentionCache*, const std::vector<MatT<S>>*,     \
                                 std::vector<MatT<S>>*);                                        \
  template MatT<S> attention_core<S>(const Model&, const Op&, const Weights<S>&,                \
                                     const MatT<S>&, const MatT<S>&, int, AttentionCache*,      \
                                     Override<S>, const std::vector<MatT<S>>*,                  \
                                     std::vector<MatT<S>>*);
BIASLAB_INSTANTIATE(float)
BIASLAB_INSTANTIATE(double)
#undef BIASLAB_INSTANTIATE

}  // namespace biaslab
