#include "model/jvp.hpp"

#include <cmath>
#include <optional>

namespace biaslab {

namespace {

// (n, F) broadcast rows -> (n*N, F): row a*N + r = row a.
Mat expand(const Mat& b, Eigen::Index N) {
  Mat out(b.rows() * N, b.cols());
  for (Eigen::Index a = 0; a < b.rows(); ++a) out.middleRows(a * N, N) = b.row(a).replicate(N, 1);
  return out;
}

// A tangent batch that may be in broadcast form.
struct Tangent {
  Mat v;
  bool broadcast = false;
  Mat dense(Eigen::Index N) const { return broadcast ? expand(v, N) : v; }
};

// a + b, staying broadcast when both are.
Tangent add(const Tangent& a, const Tangent& b, Eigen::Index N) {
  if (a.broadcast == b.broadcast) return {a.v + b.v, a.broadcast};
  return {a.dense(N) + b.dense(N), false};
}

// Elements of a norm that share statistics ("sets"), as in forward.cpp: the set of element
// (r, f) of an (N, F) input.
struct NormSets {
  const Op& op;
  int T, F;
  int id(int r, int f) const {
    switch (op.norm) {
      case NormKind::layer:
      case NormKind::rms: return r;
      case NormKind::batch_train: return f;
      case NormKind::instance: return (r / T) * F + f;
      case NormKind::group: return (r / T) * op.groups + f / (F / op.groups);
      case NormKind::batch_eval: return f;
    }
    return 0;
  }
};

// Norm JVP. With xh = normalised input and rstd per set:
//   centred norms: dy = rstd * (dx - mean(dx) - xh * mean(xh * dx))
//   RMSNorm:       dy = rstd * (dx - xh * mean(xh * dx))
//   BatchNorm eval: dy = dx / sqrt(running_var + eps)
// then scaled by the gain.
Mat norm_jvp(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n) {
  const int N = static_cast<int>(x.rows()), F = static_cast<int>(x.cols());
  const int T = N / m.batch;
  Mat dy(dx.rows(), F);
  if (op.norm == NormKind::batch_eval) {
    const Mat& rv = m.params[op.var].value;
    for (int f = 0; f < F; ++f) dy.col(f) = dx.col(f) / std::sqrt(rv(f, 0) + op.eps);
  } else {
    const NormSets sets{op, T, F};
    const bool centre = op.norm != NormKind::rms;
    const int S = op.norm == NormKind::layer || op.norm == NormKind::rms ? N
                  : op.norm == NormKind::batch_train                     ? F
                  : op.norm == NormKind::instance ? (N / T) * F
                                                  : (N / T) * op.groups;
    // Means relative to each set's first element, as in forward.cpp.
    Vec mean = Vec::Zero(S), var = Vec::Zero(S), cnt = Vec::Zero(S), first = Vec::Zero(S);
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = sets.id(r, f);
        if (cnt(s) == 0) first(s) = x(r, f);
        mean(s) += x(r, f) - first(s);
        cnt(s) += 1;
      }
    if (centre) mean = first + (mean.array() / cnt.array()).matrix();
    else mean.setZero();
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = sets.id(r, f);
        const double c = x(r, f) - mean(s);
        var(s) += c * c;
      }
    Vec rstd = ((var.array() / cnt.array()) + op.eps).rsqrt();
    Mat xh(N, F);
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = sets.id(r, f);
        xh(r, f) = (x(r, f) - mean(s)) * rstd(s);
      }
    Vec s1(S), s2(S);
    for (int a = 0; a < n; ++a) {
      auto d = dx.middleRows(static_cast<Eigen::Index>(a) * N, N);
      auto o = dy.middleRows(static_cast<Eigen::Index>(a) * N, N);
      s1.setZero();
      s2.setZero();
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          const int s = sets.id(r, f);
          s1(s) += d(r, f);
          s2(s) += xh(r, f) * d(r, f);
        }
      s1.array() /= cnt.array();
      s2.array() /= cnt.array();
      if (!centre) s1.setZero();
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          const int s = sets.id(r, f);
          o(r, f) = rstd(s) * (d(r, f) - s1(s) - xh(r, f) * s2(s));
        }
    }
  }
  if (op.gain >= 0) dy.array().rowwise() *= m.params[op.gain].value.col(0).transpose().array();
  return dy;
}

double activation_derivative(const Op& op, double x) {
  if (op.act == LayerType::relu) return x > 0 ? 1.0 : 0.0;  // torch: 0 at 0
  if (op.approx == GeluApprox::tanh) {
    const double c = 0.7978845608028654, k = 0.044715;
    const double t = std::tanh(c * (x + k * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
  }
  const double pdf = 0.3989422804014327 * std::exp(-0.5 * x * x);
  return 0.5 * (1 + std::erf(x * 0.7071067811865476)) + x * pdf;
}

// Attention core JVP when dQ, dK and dV each carry one vector per direction, the same for every
// token (a bias direction, or its image through token-independent ops; no RoPE, which rotates
// per position). Then, per direction, sample and head, with dq, dk, dv those vectors:
//   dS(i, j) = (k_j . dq + q_i . dk) / sqrt(d)   (a row term and a column term: no T x T x d product)
//   dC = dP V + P 1 dv^T
// and the dP V products of all directions are one (n*T, T) x (T, d) product.
// Same formulas as the general path, fewer operations; the exact zeros are the same.
Mat attention_jvp_broadcast(const Op& op, const AttentionCache& c, const std::optional<Tangent>& tq,
                            const std::optional<Tangent>& tk, const std::optional<Tangent>& tv, int n, int B, int T) {
  const int F = op.in, H = op.heads, d = F / H;
  const Eigen::Index N = Eigen::Index(B) * T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Mat out = Mat::Zero(Eigen::Index(n) * N, F);
  auto nonzero = [&](const std::optional<Tangent>& t, int a, int h) {
    return t && !(t->v.block(a, h * d, 1, d).array() == 0).all();
  };
  Mat U(n, T), W(n, T), dpall(Eigen::Index(n) * T, T), dc;
  std::vector<int> slot(n);  // direction -> its rows in dpall (-1: dS is exactly zero)
  std::vector<char> has_v(n);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const Mat& P = c.probs[b * H + h];
      const auto K = c.k.block(b * T, h * d, T, d), Q = c.q.block(b * T, h * d, T, d), V = c.v.block(b * T, h * d, T, d);
      // Directions whose dS is not exactly zero in this head share one product (a bias
      // direction of q or k typically reaches a single head).
      int used = 0;
      for (int a = 0; a < n; ++a) {
        slot[a] = nonzero(tq, a, h) || nonzero(tk, a, h) ? used++ : -1;
        has_v[a] = nonzero(tv, a, h);
      }
      if (used > 0) {
        if (tq) U.noalias() = tq->v.middleCols(h * d, d) * K.transpose();  // U(a, j) = k_j . dq_a
        else U.setZero();
        if (tk) W.noalias() = tk->v.middleCols(h * d, d) * Q.transpose();  // W(a, i) = q_i . dk_a
        else W.setZero();
        for (int a = 0; a < n; ++a) {
          if (slot[a] < 0) continue;
          double* dp = dpall.data() + Eigen::Index(slot[a]) * T * T;  // row-major (T, T) block
          for (int i = 0; i < T; ++i) {
            const double* p = P.data() + Eigen::Index(i) * T;
            double* o = dp + Eigen::Index(i) * T;
            const double wi = W(a, i);
            double row = 0;
            for (int j = 0; j < T; ++j) {
              o[j] = p[j] * ((U(a, j) + wi) * scale);
              row += o[j];
            }
            for (int j = 0; j < T; ++j) o[j] -= p[j] * row;
          }
        }
        dc.noalias() = dpall.topRows(Eigen::Index(used) * T) * V;
      }
      const Vec psum = P.rowwise().sum();
      for (int a = 0; a < n; ++a) {
        if (slot[a] < 0 && !has_v[a]) continue;
        auto ob = out.block(Eigen::Index(a) * N + Eigen::Index(b) * T, h * d, T, d);
        if (slot[a] >= 0) ob = dc.middleRows(Eigen::Index(slot[a]) * T, T);
        if (has_v[a]) ob.noalias() += psum * tv->v.block(a, h * d, 1, d);
      }
    }
  return out;
}

// Attention core JVP. dx: tangent of the input (or none); seeds on q/k/v biases enter after the
// projections (before RoPE, as the biases do). Per direction, sample and head:
//   dS = (dQ K^T + Q dK^T) / sqrt(d);  dP = P .* (dS - rowsum(P .* dS));  dC = dP V + P dV.
// A head whose dQ, dK, dV are all exactly zero keeps an exactly zero dC.
Mat attention_jvp(const Model& m, const Op& op, const Mat& x, const AttentionCache& c,
                  const Tangent* dx, const Seed& seed, int n) {
  const int N = static_cast<int>(x.rows()), F = op.in, H = op.heads, d = F / H;
  const int B = m.batch, T = N / B;
  // Projections of the input tangent plus any seed; nullopt when exactly zero (not allocated).
  auto project = [&](int w, int b) -> std::optional<Tangent> {
    const bool seeded = b >= 0 && b == seed.param;
    if (!dx && !seeded) return std::nullopt;
    // A broadcast input projects as one row per direction (N times less work).
    Tangent out;
    if (dx) out = {dx->v * m.params[w].value.transpose(), dx->broadcast};
    if (seeded) {
      const Tangent s{seed.values, seed.broadcast};
      out = dx ? add(out, s, N) : s;
    }
    return out;
  };
  std::optional<Tangent> tq = project(op.wq, op.bq), tk = project(op.wk, op.bk), tv = project(op.wv, op.bv);
  const bool all_broadcast = !op.rope && (!tq || tq->broadcast) && (!tk || tk->broadcast) && (!tv || tv->broadcast);
  if (all_broadcast) return attention_jvp_broadcast(op, c, tq, tk, tv, n, B, T);
  auto dense = [&](std::optional<Tangent>& t) -> std::optional<Mat> {
    if (!t) return std::nullopt;
    return t->broadcast ? expand(t->v, N) : std::move(t->v);
  };
  std::optional<Mat> dq = dense(tq), dk = dense(tk), dv = dense(tv);
  if (op.rope) {
    if (dq) rope_rotate(*dq, n * B, T, H);
    if (dk) rope_rotate(*dk, n * B, T, H);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Mat out = Mat::Zero(Eigen::Index(n) * N, F);
  Mat ds(T, T), dp(T, T);
  auto zero_block = [&](const std::optional<Mat>& z, Eigen::Index row, int h) {
    return !z || (z->block(row, h * d, T, d).array() == 0).all();
  };
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < B; ++b) {
      const Eigen::Index row = Eigen::Index(a) * N + Eigen::Index(b) * T;
      for (int h = 0; h < H; ++h) {
        const bool q0 = zero_block(dq, row, h), k0 = zero_block(dk, row, h), v0 = zero_block(dv, row, h);
        if (q0 && k0 && v0) continue;
        const Mat& P = c.probs[b * H + h];
        auto ob = out.block(row, h * d, T, d);
        if (!q0 || !k0) {
          ds.setZero();
          if (!q0) ds.noalias() += dq->block(row, h * d, T, d) * c.k.block(b * T, h * d, T, d).transpose();
          if (!k0) ds.noalias() += c.q.block(b * T, h * d, T, d) * dk->block(row, h * d, T, d).transpose();
          ds *= scale;
          dp = P.cwiseProduct(ds);
          const Vec rows = dp.rowwise().sum();
          dp -= P.cwiseProduct(rows.replicate(1, T));
          ob.noalias() += dp * c.v.block(b * T, h * d, T, d);
        }
        if (!v0) ob.noalias() += P * dv->block(row, h * d, T, d);
      }
    }
  return out;
}

}  // namespace

Mat op_jvp(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n) {
  const Eigen::Index N = x.rows();
  switch (op.kind) {
    case OpKind::linear:
      return dx * m.params[op.w].value.transpose();
    case OpKind::norm:
      return norm_jvp(m, op, x, dx, n);
    case OpKind::activation: {
      const Mat g = x.unaryExpr([&](double v) { return activation_derivative(op, v); });
      Mat dy = dx;
      for (int a = 0; a < n; ++a) dy.middleRows(a * N, N).array() *= g.array();
      return dy;
    }
    case OpKind::softmax: {
      Mat y = x;
      for (Eigen::Index r = 0; r < N; ++r) {
        y.row(r).array() = (y.row(r).array() - y.row(r).maxCoeff()).exp();
        y.row(r) /= y.row(r).sum();
      }
      Mat dy(dx.rows(), dx.cols());
      for (int a = 0; a < n; ++a) {
        auto d = dx.middleRows(a * N, N);
        const Mat yd = y.cwiseProduct(d);
        const Vec s = yd.rowwise().sum();
        dy.middleRows(a * N, N) = yd - y.cwiseProduct(s.replicate(1, x.cols()));
      }
      return dy;
    }
    case OpKind::attention:
    case OpKind::residual_begin:
    case OpKind::residual_end:
      break;
  }
  return dx;
}

Mat jvp(const Model& m, const Trace& trace, const Seed& seed, int n, int stop, bool* broadcast) {
  const int start = m.params[seed.param].op;
  const Eigen::Index N = trace.inputs[0].rows();
  // Residual skips pushed before `start` carry no tangent (nullopt).
  std::vector<std::optional<Tangent>> skips;
  for (int i = 0; i < start; ++i) {
    if (m.ops[i].kind == OpKind::residual_begin) skips.emplace_back();
    if (m.ops[i].kind == OpKind::residual_end) skips.pop_back();
  }
  std::optional<Tangent> d;  // nullopt: exactly zero
  auto add_seed = [&](int p) {
    if (p < 0 || p != seed.param) return;
    const Tangent s{seed.values, seed.broadcast};
    d = d ? add(*d, s, N) : s;
  };
  auto per_token = [&]() {  // the op treats tokens differently: leave broadcast form
    if (d && d->broadcast) d = Tangent{expand(d->v, N), false};
  };
  for (int i = start; i < stop; ++i) {
    const Op& op = m.ops[i];
    const Mat& x = trace.inputs[i];
    switch (op.kind) {
      case OpKind::residual_begin:
        skips.push_back(d);
        break;
      case OpKind::residual_end: {
        std::optional<Tangent> s = std::move(skips.back());
        skips.pop_back();
        if (s) d = d ? add(*d, *s, N) : *s;
        break;
      }
      case OpKind::attention:
        if (d || (seed.param >= 0 && (seed.param == op.bq || seed.param == op.bk ||
                                      seed.param == op.bv)))
          d = Tangent{attention_jvp(m, op, x, trace.attention[i], d ? &*d : nullptr, seed, n), false};
        break;
      case OpKind::linear:  // token-independent: keeps broadcast form
        if (d) d->v = Mat(d->v * m.params[op.w].value.transpose());  // moved in, not copied
        add_seed(op.b);
        break;
      case OpKind::norm:
        if (d) {
          if (op.norm != NormKind::batch_eval) per_token();  // batch_eval scales columns only
          d->v = norm_jvp(m, op, x, d->v, d->broadcast ? static_cast<int>(d->v.rows()) : n);
        }
        add_seed(op.shift);
        break;
      default:
        per_token();
        if (d) d->v = op_jvp(m, op, x, d->v, n);
    }
  }
  const int width = stop < static_cast<int>(m.ops.size()) ? m.ops[stop].in : m.out_features;
  if (broadcast) *broadcast = d && d->broadcast;
  if (broadcast && *broadcast) return d->v;
  if (!d) return Mat::Zero(Eigen::Index(n) * N, width);
  return d->broadcast ? expand(d->v, N) : std::move(d->v);
}

int trailing_cut(const Model& m, int start) {
  const int end = static_cast<int>(m.ops.size());
  int best = end;
  int open = 0;  // residual ends in the suffix whose begin lies after `start` and is not included
  for (int c = end - 1; c > start; --c) {
    const Op& op = m.ops[c];
    const bool linear_op = op.kind == OpKind::linear ||
                           (op.kind == OpKind::norm && op.norm == NormKind::batch_eval) ||
                           op.kind == OpKind::residual_begin || op.kind == OpKind::residual_end;
    if (!linear_op) break;
    if (op.kind == OpKind::residual_end && op.partner > start) ++open;
    if (op.kind == OpKind::residual_begin) --open;
    if (open == 0) best = c;
  }
  return best;
}

Mat trailing_map(const Model& m, int start, int cut) {
  const int end = static_cast<int>(m.ops.size());
  const int w = cut < end ? m.ops[cut].in : m.out_features;
  // A composed op by op, A <- (map of op) A, starting from an implicit identity (nullopt), so
  // that a single Linear costs a copy of its weight, not a product with the identity.
  std::optional<Mat> a;
  auto eye = [](const std::optional<Mat>& x, int n) { return x ? *x : Mat(Mat::Identity(n, n)); };
  std::vector<std::optional<Mat>> skips;
  int width = w;
  for (int i = cut; i < end; ++i) {
    const Op& op = m.ops[i];
    if (op.kind == OpKind::residual_begin) {
      skips.push_back(a);
    } else if (op.kind == OpKind::residual_end) {
      if (op.partner >= cut) {  // else the skip was pushed before the seed entered: no tangent
        const std::optional<Mat> s = std::move(skips.back());
        skips.pop_back();
        a = eye(a, w) + eye(s, w);
      }
    } else if (op.kind == OpKind::linear) {
      const Mat& W = m.params[op.w].value;
      a = a ? Mat(W * *a) : W;
      width = op.out;
    } else {  // batchnorm eval: a diagonal scale per feature
      const Mat& rv = m.params[op.var].value;
      Vec s = (rv.col(0).array() + op.eps).rsqrt();
      if (op.gain >= 0) s.array() *= m.params[op.gain].value.col(0).array();
      a = s.asDiagonal() * eye(a, width);
    }
  }
  return eye(a, w);
}

}  // namespace biaslab
