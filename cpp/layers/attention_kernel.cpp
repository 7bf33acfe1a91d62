// The attention op's arithmetic: forward (attention_core), RoPE, and the JVPs. The layer kind that
// compiles to it is attention.cpp.
#include "layers/attention.hpp"

#include <cmath>

#include "layers/layer.hpp"
#include "layers/norm.hpp"

namespace biaslab {

using jvp_detail::Tangent;
using jvp_detail::expand;
using jvp_detail::add;

namespace {

// In-place RoPE on (B*T, F) rows, per head of d dimensions: the first r = op.rotary_dim rotate,
// pair i (features i and i + r/2, or 2i and 2i + 1 interleaved) by t * base^(-2i/r); the rest
// pass unchanged (partial RoPE, as GPT-NeoX).
template <class S>
void apply_rope(MatT<S>& z, int batch, int tokens, const Op& op, int heads) {
  const int d = op.in / op.heads, r = op.rotary_dim, half = r / 2;
  Mat c, s;
  rope_tables(tokens, r, c, s, op.rope_base);
  const int first_step = op.rope_interleaved ? 2 : 1, second = op.rope_interleaved ? 1 : half;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          S& a = z(b * tokens + t, h * d + first_step * i);
          S& e = z(b * tokens + t, h * d + first_step * i + second);
          const S ct = S(c(t, i)), st = S(s(t, i));
          const S a0 = a, e0 = e;
          a = a0 * ct - e0 * st;
          e = e0 * ct + a0 * st;
        }
}

// The heads of an (N, heads*d) matrix stacked as (heads*N, d), head h in rows h*N .. h*N + N - 1,
// and back: the view a per-head norm (qk_norm) normalises row by row.
template <class Derived>
MatT<typename Derived::Scalar> stack_heads(const Eigen::MatrixBase<Derived>& z, int heads, int d) {
  const Eigen::Index N = z.rows();
  MatT<typename Derived::Scalar> s(N * heads, d);
  for (int h = 0; h < heads; ++h) s.middleRows(h * N, N) = z.middleCols(Eigen::Index(h) * d, d);
  return s;
}
template <class S, class Derived>
void unstack_heads(const MatT<S>& s, Eigen::MatrixBase<Derived>& z, int heads, int d) {
  const Eigen::Index N = z.rows();
  for (int h = 0; h < heads; ++h) z.middleCols(Eigen::Index(h) * d, d) = s.middleRows(h * N, N);
}

// The norm op of qk_norm: LayerNorm or RMSNorm over one head's d dimensions, with the gain and
// shift every head shares.
Op head_norm_op(const Op& op, int gain, int shift) {
  Op n;
  n.kind = OpKind::norm;
  n.norm = op.qk_norm_kind;
  n.in = n.out = op.in / op.heads;
  n.eps = kQkNormEps;
  n.gain = gain;
  n.shift = shift;
  return n;
}

// qk_norm in place on q (heads = op.heads) or k (op.kv_heads), (N, heads*d).
template <class S>
void head_norm(MatT<S>& z, const Op& op, const Weights<S>& w, Override<S> ov, int heads, int gain, int shift) {
  const int d = op.in / op.heads;
  MatT<S> y = norm_forward<S>(head_norm_op(op, gain, shift), w, ov, stack_heads(z, heads, d), 1);
  unstack_heads(y, z, heads, d);
}

}  // namespace

void rope_rotate(Mat& z, int batch, int tokens, const Op& op, int heads) {
  apply_rope<double>(z, batch, tokens, op, heads);
}

void rope_rotate(Mat& z, int batch, int tokens, int heads) {
  Op op;
  op.heads = op.kv_heads = heads;
  op.in = static_cast<int>(z.cols());
  op.rotary_dim = op.in / heads;
  rope_rotate(z, batch, tokens, op, heads);
}

void rope_tables(int tokens, int rotary_dim, Mat& cos_t, Mat& sin_t, double base) {
  const int half = rotary_dim / 2;
  cos_t.resize(tokens, half);
  sin_t.resize(tokens, half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(base, -2.0 * i / rotary_dim);
    for (int t = 0; t < tokens; ++t) {
      cos_t(t, i) = std::cos(t * inv_freq);
      sin_t(t, i) = std::sin(t * inv_freq);
    }
  }
}

Mat repeat_kv_matrix(int heads, int kv_heads, int head_dim) {
  const int group = heads / kv_heads;
  Mat r = Mat::Zero(Eigen::Index(heads) * head_dim, Eigen::Index(kv_heads) * head_dim);
  for (int h = 0; h < heads; ++h)
    r.block(Eigen::Index(h) * head_dim, Eigen::Index(h / group) * head_dim, head_dim, head_dim).setIdentity();
  return r;
}

template <class S>
MatT<S> attention_core(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& xq,
                       const MatT<S>& xkv, int batch, AttentionCache* cache, Override<S> ov,
                       const std::vector<MatT<S>>* pre, std::vector<MatT<S>>* products) {
  auto opt = [&](int i) { return i >= 0 ? &param(w, ov, i) : nullptr; };
  const int F = op.in, H = op.heads, d = F / H, group = H / op.kv_heads;
  const int Tq = static_cast<int>(xq.rows()) / batch, Tk = static_cast<int>(xkv.rows()) / batch;
  if (products) products->assign(3, MatT<S>());
  auto pre_i = [&](int i) { return pre ? &(*pre)[i] : nullptr; };
  auto out_i = [&](int i) { return products ? &(*products)[i] : nullptr; };
  MatT<S> q = linear<S>(xq, param(w, ov, op.wq), opt(op.bq), pre_i(0), out_i(0));
  MatT<S> k = linear<S>(xkv, param(w, ov, op.wk), opt(op.bk), pre_i(1), out_i(1));
  MatT<S> v = linear<S>(xkv, param(w, ov, op.wv), opt(op.bv), pre_i(2), out_i(2));
  if (op.qk_norm) {
    if (cache) {
      cache->q_pre = q.template cast<double>();
      cache->k_pre = k.template cast<double>();
    }
    head_norm(q, op, w, ov, op.heads, op.qn_gain, op.qn_shift);
    head_norm(k, op, w, ov, op.kv_heads, op.kn_gain, op.kn_shift);
  }
  if (op.rope) {
    apply_rope(q, batch, Tq, op, op.heads);
    apply_rope(k, batch, Tk, op, op.kv_heads);
  }
  const S scale = S(1) / std::sqrt(S(d));
  MatT<S> ctx(xq.rows(), F);
  MatT<S> scores(Tq, Tk);
  if (cache) cache->probs.assign(static_cast<size_t>(batch) * H, Mat());
  if (cache) cache->sink.assign(op.sinks >= 0 ? static_cast<size_t>(batch) * H : 0, Vec());
  const MatT<S>* sinks = op.sinks >= 0 ? &param(w, ov, op.sinks) : nullptr;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < H; ++h) {
      auto qb = q.block(b * Tq, h * d, Tq, d);
      const int g = h / group;  // the kv head this query head reads (HF repeat_kv)
      auto kb = k.block(b * Tk, g * d, Tk, d);
      scores.noalias() = (qb * kb.transpose()) * scale;
      // causal: query i sees keys j <= i; a sink logit joins every row
      if (sinks)
        softmax_rows<S>(scores, op.causal, (*sinks)(h, 0), cache ? &cache->sink[b * H + h] : nullptr);
      else
        softmax_rows<S>(scores, op.causal);
      ctx.block(b * Tq, h * d, Tq, d).noalias() = scores * v.block(b * Tk, g * d, Tk, d);
      if (cache) cache->probs[b * H + h] = scores.template cast<double>();
    }
  if (cache) {
    cache->q = q.template cast<double>();
    cache->k = k.template cast<double>();
    cache->v = v.template cast<double>();
  }
  return ctx;
}

template MatT<float> attention_core<float>(const Model&, const Op&, const Weights<float>&, const MatT<float>&,
                                           const MatT<float>&, int, AttentionCache*, Override<float>,
                                           const std::vector<MatT<float>>*, std::vector<MatT<float>>*);
template MatT<double> attention_core<double>(const Model&, const Op&, const Weights<double>&, const MatT<double>&,
                                             const MatT<double>&, int, AttentionCache*, Override<double>,
                                             const std::vector<MatT<double>>*, std::vector<MatT<double>>*);

namespace {

// Attention core JVP when dQ, dK and dV each carry one vector per direction, the same for every
// token (a bias direction, or its image through token-independent ops; no RoPE, which rotates
// per position). Then, per direction, sample and head, with dq, dk, dv those vectors:
//   dS(i, j) = (k_j . dq + q_i . dk) / sqrt(d)   (a row term and a column term: no T x T x d product)
//   dC = dP V + P 1 dv^T
// and the dP V products of all directions are one (n*T, Tk) x (Tk, d) product. T queries, Tk
// keys (Tk = T but in cross-attention).
// The column term q_i . dk is the same for every key of query i, and a softmax does not see a
// constant added to its row: without sinks (a logit dk does not move) it is left out, and a
// direction whose dq is zero in a head has an exactly zero dP there, where rounding would leave
// about 1e-17. Otherwise the same formulas as the general path, fewer operations.
// Each (T, d) block of the output that is not exactly zero goes to emit(a, b, h, dc, dv): direction
// a, sample b, head h; the block is rows [dc's first, + T) of `dc` (none: nullptr) plus
// psum dv^T (dv: nullptr for none), written by the emitter.
template <class Emit>
void attention_jvp_broadcast(const Op& op, const AttentionCache& c, const std::optional<Tangent>& tq,
                             const std::optional<Tangent>& tk, const std::optional<Tangent>& tv, int n, int B, int T,
                             int Tk, Emit&& emit) {
  const int H = op.heads, d = op.in / H, group = H / op.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool row_terms = op.sinks >= 0;  // a constant per row moves a softmax with a sink
  // Column block of head h in a tangent of q (width F) or of k, v (width kv_heads * d).
  auto nonzero = [&](const std::optional<Tangent>& t, int a, int col) {
    return t && !(t->v.block(a, col * d, 1, d).array() == 0).all();
  };
  Mat U(n, Tk), W(n, T), dpall(Eigen::Index(n) * T, Tk), dc;
  std::vector<int> slot(n);  // direction -> its rows in dpall (-1: dS is exactly zero)
  std::vector<char> has_v(n);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const Mat& P = c.probs[b * H + h];
      const int g = h / group;
      const auto K = c.k.block(b * Tk, g * d, Tk, d), Q = c.q.block(b * T, h * d, T, d), V = c.v.block(b * Tk, g * d, Tk, d);
      // Directions whose dS is not exactly zero in this head share one product (a bias
      // direction of q or k typically reaches a single head).
      int used = 0;
      for (int a = 0; a < n; ++a) {
        slot[a] = nonzero(tq, a, h) || (row_terms && nonzero(tk, a, g)) ? used++ : -1;
        has_v[a] = nonzero(tv, a, g);
      }
      if (used > 0) {
        if (tq) U.noalias() = tq->v.middleCols(h * d, d) * K.transpose();  // U(a, j) = k_j . dq_a
        else U.setZero();
        if (tk && row_terms) W.noalias() = tk->v.middleCols(g * d, d) * Q.transpose();  // W(a, i) = q_i . dk_a
        else W.setZero();
        for (int a = 0; a < n; ++a) {
          if (slot[a] < 0) continue;
          double* dp = dpall.data() + Eigen::Index(slot[a]) * T * Tk;  // row-major (T, Tk) block
          for (int i = 0; i < T; ++i) {
            const double* p = P.data() + Eigen::Index(i) * Tk;
            double* o = dp + Eigen::Index(i) * Tk;
            const double wi = W(a, i);
            double row = 0;
            for (int j = 0; j < Tk; ++j) {
              o[j] = p[j] * ((U(a, j) + wi) * scale);
              row += o[j];
            }
            for (int j = 0; j < Tk; ++j) o[j] -= p[j] * row;
          }
        }
        dc.noalias() = dpall.topRows(Eigen::Index(used) * T) * V;
      }
      const Vec psum = P.rowwise().sum();
      for (int a = 0; a < n; ++a) {
        if (slot[a] < 0 && !has_v[a]) continue;
        emit(a, b, h, slot[a] >= 0 ? dc.data() + Eigen::Index(slot[a]) * T * d : nullptr, psum,
             has_v[a] ? tv->v.data() + Eigen::Index(a) * tv->v.cols() + g * d : nullptr);
      }
    }
}

// The block (T, d) that attention_jvp_broadcast hands over, added into `ob` (zero before).
template <class Block>
void add_block(Block&& ob, const double* dc, const Vec& psum, const double* dv) {
  const Eigen::Index T = ob.rows(), d = ob.cols();
  if (dc) ob = Eigen::Map<const Mat>(dc, T, d);
  if (dv) ob.noalias() += psum * Eigen::Map<const Eigen::RowVectorXd>(dv, d);
}

// The tangent of qk_norm's output for q or k: dz (dense, (n*N, heads*d), or none) through the
// per-head norm at its input `pre`, plus a seed on the norm's shift (every head's copy).
std::optional<Mat> head_norm_jvp(const Model& m, const Op& op, const Mat& pre, std::optional<Mat> dz,
                                 const Seed& seed, int heads, int gain, int shift, int n) {
  const int d = op.in / op.heads;
  const Eigen::Index N = pre.rows(), rows = N * heads;
  if (dz) {
    Mat dx(Eigen::Index(n) * rows, d);
    for (int a = 0; a < n; ++a) dx.middleRows(a * rows, rows) = stack_heads(dz->middleRows(a * N, N), heads, d);
    const Mat dy = norm_jvp(m, head_norm_op(op, gain, shift), stack_heads(pre, heads, d), dx, n);
    for (int a = 0; a < n; ++a) {
      auto block = dz->middleRows(a * N, N);
      unstack_heads(Mat(dy.middleRows(a * rows, rows)), block, heads, d);
    }
  }
  if (shift >= 0 && seed.param == shift) {
    if (!dz) dz = Mat::Zero(Eigen::Index(n) * N, Eigen::Index(heads) * d);
    for (int a = 0; a < n; ++a)
      for (int h = 0; h < heads; ++h) {
        auto block = dz->block(a * N, Eigen::Index(h) * d, N, d);
        if (seed.broadcast) block.rowwise() += seed.values.row(a);
        else block += seed.values.middleRows(a * N, N);
      }
  }
  return dz;
}

// Attention core JVP. dx: tangent of the input (or none); seeds on q/k/v biases enter after the
// projections (before qk_norm and RoPE, as the biases do). Per direction, sample and head:
//   dS = (dQ K^T + Q dK^T) / sqrt(d);  dP = P .* (dS - rowsum(P .* dS));  dC = dP V + P dV.
// A head whose dQ, dK, dV are all exactly zero keeps an exactly zero dC.
}  // namespace

Mat attention_jvp(const Model& m, const Op& op, const Mat& x, const AttentionCache& c,
                  const Tangent* dx, const Seed& seed, int n) {
  const int N = static_cast<int>(x.rows()), F = op.in, H = op.heads, d = F / H, group = H / op.kv_heads;
  const int B = m.batch, T = N / B;
  // Keys and values: T of them, or the context's Tk in cross-attention, where the input's
  // tangent reaches the queries alone.
  const bool cross = op.context > 0;
  const int Tk = cross ? op.context : T;
  const Eigen::Index Nk = Eigen::Index(B) * Tk;
  // Projections of the input tangent plus any seed; nullopt when exactly zero (not allocated).
  auto project = [&](int w, int b, bool reads_input, Eigen::Index rows) -> std::optional<Tangent> {
    const bool seeded = b >= 0 && b == seed.param;
    const Tangent* in = reads_input ? dx : nullptr;
    if (!in && !seeded) return std::nullopt;
    // A broadcast input projects as one row per direction (N times less work).
    Tangent out;
    if (in) out = {in->v * m.params[w].value.transpose(), in->broadcast};
    if (seeded) {
      const Tangent s{seed.values, seed.broadcast};
      out = in ? add(out, s, rows) : s;
    }
    return out;
  };
  std::optional<Tangent> tq = project(op.wq, op.bq, true, N), tk = project(op.wk, op.bk, !cross, Nk),
                         tv = project(op.wv, op.bv, !cross, Nk);
  const bool sink_seeded = op.sinks >= 0 && seed.param == op.sinks;
  const bool all_broadcast = !op.rope && !op.qk_norm && !sink_seeded && (!tq || tq->broadcast) && (!tk || tk->broadcast) &&
                             (!tv || tv->broadcast);
  if (all_broadcast) {  // (an empty matrix where every tangent is exactly zero)
    Mat out;
    attention_jvp_broadcast(op, c, tq, tk, tv, n, B, T, Tk,
                            [&](int a, int b, int h, const double* dc, const Vec& psum, const double* dv) {
                              if (out.size() == 0) out = Mat::Zero(Eigen::Index(n) * N, F);
                              add_block(out.block(Eigen::Index(a) * N + Eigen::Index(b) * T, h * d, T, d), dc, psum, dv);
                            });
    return out;
  }
  auto dense = [&](std::optional<Tangent>& t, Eigen::Index rows) -> std::optional<Mat> {
    if (!t) return std::nullopt;
    return t->broadcast ? expand(t->v, rows) : std::move(t->v);
  };
  std::optional<Mat> dq = dense(tq, N), dk = dense(tk, Nk), dv = dense(tv, Nk);
  if (op.qk_norm) {
    dq = head_norm_jvp(m, op, c.q_pre, std::move(dq), seed, op.heads, op.qn_gain, op.qn_shift, n);
    dk = head_norm_jvp(m, op, c.k_pre, std::move(dk), seed, op.kv_heads, op.kn_gain, op.kn_shift, n);
  }
  if (op.rope) {  // never with a context (refused)
    if (dq) rope_rotate(*dq, n * B, T, op, op.heads);
    if (dk) rope_rotate(*dk, n * B, T, op, op.kv_heads);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Mat out = Mat::Zero(Eigen::Index(n) * N, F);
  Mat ds(T, Tk), dp(T, Tk);
  auto zero_block = [&](const std::optional<Mat>& z, Eigen::Index row, int col, int rows) {
    return !z || (z->block(row, col * d, rows, d).array() == 0).all();
  };
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < B; ++b) {
      const Eigen::Index row = Eigen::Index(a) * N + Eigen::Index(b) * T;
      const Eigen::Index rowk = Eigen::Index(a) * Nk + Eigen::Index(b) * Tk;
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const bool q0 = zero_block(dq, row, h, T), k0 = zero_block(dk, rowk, g, Tk), v0 = zero_block(dv, rowk, g, Tk);
        if (q0 && k0 && v0 && !sink_seeded) continue;
        const Mat& P = c.probs[b * H + h];
        const auto V = c.v.block(b * Tk, g * d, Tk, d);
        auto ob = out.block(row, h * d, T, d);
        if (!q0 || !k0) {
          ds.setZero();
          if (!q0) ds.noalias() += dq->block(row, h * d, T, d) * c.k.block(b * Tk, g * d, Tk, d).transpose();
          if (!k0) ds.noalias() += c.q.block(b * T, h * d, T, d) * dk->block(rowk, g * d, Tk, d).transpose();
          ds *= scale;
          dp = P.cwiseProduct(ds);
          const Vec rows = dp.rowwise().sum();
          dp -= P.cwiseProduct(rows.replicate(1, Tk));
          ob.noalias() += dp * V;
        }
        if (!v0) ob.noalias() += P * dv->block(rowk, g * d, Tk, d);
        if (sink_seeded) {
          // A sink logit moved by ds: dP_ij = -P_ij s_i ds, with s_i row i's weight on the sink
          // (the seed may differ per query row when dense).
          const Vec& s = c.sink[b * H + h];
          Vec coef(T);
          for (int i = 0; i < T; ++i)
            coef(i) = -s(i) * (seed.broadcast ? seed.values(a, h) : seed.values(row + i, h));
          ob.noalias() += coef.asDiagonal() * (P * V);
        }
      }
    }
  return out;
}

bool attention_bias_blocks(const Model& m, const Op& op, const AttentionCache& c, const Seed& seed, int n,
                           const std::function<void(int, int, int, const Mat&)>& emit) {
  const int p = seed.param;
  if (op.rope || op.qk_norm || !seed.broadcast || p < 0 || !(p == op.bq || p == op.bk || p == op.bv)) return false;
  const int B = m.batch, T = static_cast<int>(c.q.rows()) / B, Tk = op.context > 0 ? op.context : T;
  std::optional<Tangent> t[3];  // q, k, v: the seed's alone (no input tangent)
  t[p == op.bq ? 0 : p == op.bk ? 1 : 2] = Tangent{seed.values, true};
  Mat block(T, op.in / op.heads);
  attention_jvp_broadcast(op, c, t[0], t[1], t[2], n, B, T, Tk,
                          [&](int a, int b, int h, const double* dc, const Vec& psum, const double* dv) {
                            block.setZero();
                            add_block(block, dc, psum, dv);
                            emit(a, b, h, block);
                          });
  return true;
}

std::optional<std::vector<QueryFactors>> query_bias_factors(const Model& m, const Op& op, const AttentionCache& c,
                                                            int param, Eigen::Index row) {
  if (!query_bias_factorable(op, param)) return std::nullopt;
  const int H = op.heads, d = op.in / H, group = H / op.kv_heads;
  const int T = static_cast<int>(c.q.rows()) / m.batch, Tk = op.context > 0 ? op.context : T;
  const int b = static_cast<int>(row / T), i = static_cast<int>(row % T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool key = param == op.bk;
  // RoPE turns the query at position i by R_i (d x d, every head alike): apply_rope's pairs and
  // angles as a matrix (never with a context: refused). A key bias moves key t by R_t dk.
  Mat ct, st;
  if (op.rope) rope_tables(key ? Tk : i + 1, op.rotary_dim, ct, st, op.rope_base);
  auto rotation = [&](int t) {
    const int half = op.rotary_dim / 2, first_step = op.rope_interleaved ? 2 : 1, second = op.rope_interleaved ? 1 : half;
    Mat R = Mat::Identity(d, d);
    for (int k = 0; k < half; ++k) {
      const int a = first_step * k, e = a + second;
      R(a, a) = R(e, e) = ct(t, k);
      R(a, e) = -st(t, k);
      R(e, a) = st(t, k);
    }
    return R;
  };
  Mat R;
  if (op.rope && !key) R = rotation(i);
  std::vector<Mat> Rt;  // (a key bias) each key's rotation
  if (key)
    for (int t = 0; t < Tk; ++t) Rt.push_back(rotation(t));
  std::vector<QueryFactors> out(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) {
    const int g = h / group;
    const Vec p = c.probs[b * H + h].row(i).transpose();  // (Tk): row i's weights on the keys
    const auto V = c.v.block(Eigen::Index(b) * Tk, g * d, Tk, d);
    // Only the keys the row weighs (p_t != 0: a causal mask's later keys weigh exactly 0, and
    // their columns of L are exactly 0).
    std::vector<Eigen::Index> keys;
    for (Eigen::Index t = 0; t < p.size(); ++t)
      if (p(t) != 0) keys.push_back(t);
    const auto n = static_cast<Eigen::Index>(keys.size());
    Mat Vs(n, d), Ks(n, d);
    Vec ps(n);
    for (Eigen::Index j = 0; j < n; ++j) {
      const Eigen::Index t = keys[static_cast<size_t>(j)];
      ps(j) = p(t);
      Vs.row(j) = V.row(t);
      if (key)  // score t moves by scale q_i . R_t dk: row t of K is q_i^T R_t
        Ks.row(j) = c.q.block(row, Eigen::Index(h) * d, 1, d) * Rt[static_cast<size_t>(t)];
      else
        Ks.row(j) = c.k.block(Eigen::Index(b) * Tk + t, g * d, 1, d);
    }
    QueryFactors& f = out[static_cast<size_t>(h)];
    const Vec vp = Vs.transpose() * ps;
    f.L = scale * (Vs.transpose() * ps.asDiagonal() - vp * ps.transpose());
    f.K = Ks;
    if (op.rope && !key) f.K = f.K * R;
    if (op.qk_norm && !key) {  // the norm's tangents of the d unit moves of this head's query: rows of N^T
      const Mat Nt = norm_jvp(m, head_norm_op(op, op.qn_gain, op.qn_shift),
                              Mat(c.q_pre.block(row, Eigen::Index(h) * d, 1, d)), Mat::Identity(d, d), d);
      f.K = f.K * Nt.transpose();
    }
    // Without sinks the weights sum to 1, so L 1 = 0 (to rounding): L K = (L Q)(Q^T K) for Q an
    // orthonormal basis of the vectors orthogonal to 1 (n - 1 columns: the last n - 1 columns of
    // the reflection that takes e_1 to 1 / sqrt(n)), one column fewer through the later layers.
    if (op.sinks < 0 && n >= 2) {
      Vec w = Vec::Constant(n, 1.0 / std::sqrt(static_cast<double>(n)));
      w(0) -= 1.0;
      w /= w.norm();
      const Mat Q = Mat::Identity(n, n).rightCols(n - 1) - 2.0 * w * w.tail(n - 1).transpose();
      f.L = f.L * Q;
      f.K = Q.transpose() * f.K;
    } else if (op.sinks < 0) {  // one key: its weight is 1 and L = 0 exactly; nothing moves the output
      f.L.resize(d, 0);
      f.K.resize(0, d);
    }
  }
  return out;
}

}  // namespace biaslab
