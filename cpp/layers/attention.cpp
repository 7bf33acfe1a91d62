// The attention layer kind, and the attention op's forward and JVP, side by side.
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
// and the dP V products of all directions are one (n*T, T) x (T, d) product.
// Same formulas as the general path, fewer operations; the exact zeros are the same.
Mat attention_jvp_broadcast(const Op& op, const AttentionCache& c, const std::optional<Tangent>& tq,
                            const std::optional<Tangent>& tk, const std::optional<Tangent>& tv, int n, int B, int T) {
  const int F = op.in, H = op.heads, d = F / H, group = H / op.kv_heads;
  const Eigen::Index N = Eigen::Index(B) * T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Mat out = Mat::Zero(Eigen::Index(n) * N, F);
  // Column block of head h in a tangent of q (width F) or of k, v (width kv_heads * d).
  auto nonzero = [&](const std::optional<Tangent>& t, int a, int col) {
    return t && !(t->v.block(a, col * d, 1, d).array() == 0).all();
  };
  Mat U(n, T), W(n, T), dpall(Eigen::Index(n) * T, T), dc;
  std::vector<int> slot(n);  // direction -> its rows in dpall (-1: dS is exactly zero)
  std::vector<char> has_v(n);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const Mat& P = c.probs[b * H + h];
      const int g = h / group;
      const auto K = c.k.block(b * T, g * d, T, d), Q = c.q.block(b * T, h * d, T, d), V = c.v.block(b * T, g * d, T, d);
      // Directions whose dS is not exactly zero in this head share one product (a bias
      // direction of q or k typically reaches a single head).
      int used = 0;
      for (int a = 0; a < n; ++a) {
        slot[a] = nonzero(tq, a, h) || nonzero(tk, a, g) ? used++ : -1;
        has_v[a] = nonzero(tv, a, g);
      }
      if (used > 0) {
        if (tq) U.noalias() = tq->v.middleCols(h * d, d) * K.transpose();  // U(a, j) = k_j . dq_a
        else U.setZero();
        if (tk) W.noalias() = tk->v.middleCols(g * d, d) * Q.transpose();  // W(a, i) = q_i . dk_a
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
        if (has_v[a]) ob.noalias() += psum * tv->v.block(a, g * d, 1, d);
      }
    }
  return out;
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
  const bool sink_seeded = op.sinks >= 0 && seed.param == op.sinks;
  const bool all_broadcast = !op.rope && !op.qk_norm && !sink_seeded && (!tq || tq->broadcast) && (!tk || tk->broadcast) &&
                             (!tv || tv->broadcast);
  if (all_broadcast) return attention_jvp_broadcast(op, c, tq, tk, tv, n, B, T);
  auto dense = [&](std::optional<Tangent>& t) -> std::optional<Mat> {
    if (!t) return std::nullopt;
    return t->broadcast ? expand(t->v, N) : std::move(t->v);
  };
  std::optional<Mat> dq = dense(tq), dk = dense(tk), dv = dense(tv);
  if (op.qk_norm) {
    dq = head_norm_jvp(m, op, c.q_pre, std::move(dq), seed, op.heads, op.qn_gain, op.qn_shift, n);
    dk = head_norm_jvp(m, op, c.k_pre, std::move(dk), seed, op.kv_heads, op.kn_gain, op.kn_shift, n);
  }
  if (op.rope) {
    if (dq) rope_rotate(*dq, n * B, T, op, op.heads);
    if (dk) rope_rotate(*dk, n * B, T, op, op.kv_heads);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Mat out = Mat::Zero(Eigen::Index(n) * N, F);
  Mat ds(T, T), dp(T, T);
  auto zero_block = [&](const std::optional<Mat>& z, Eigen::Index row, int col) {
    return !z || (z->block(row, col * d, T, d).array() == 0).all();
  };
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < B; ++b) {
      const Eigen::Index row = Eigen::Index(a) * N + Eigen::Index(b) * T;
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const bool q0 = zero_block(dq, row, h), k0 = zero_block(dk, row, g), v0 = zero_block(dv, row, g);
        if (q0 && k0 && v0 && !sink_seeded) continue;
        const Mat& P = c.probs[b * H + h];
        auto ob = out.block(row, h * d, T, d);
        if (!q0 || !k0) {
          ds.setZero();
          if (!q0) ds.noalias() += dq->block(row, h * d, T, d) * c.k.block(b * T, g * d, T, d).transpose();
          if (!k0) ds.noalias() += c.q.block(b * T, h * d, T, d) * dk->block(row, g * d, T, d).transpose();
          ds *= scale;
          dp = P.cwiseProduct(ds);
          const Vec rows = dp.rowwise().sum();
          dp -= P.cwiseProduct(rows.replicate(1, T));
          ob.noalias() += dp * c.v.block(b * T, g * d, T, d);
        }
        if (!v0) ob.noalias() += P * dv->block(row, g * d, T, d);
        if (sink_seeded) {
          // A sink logit moved by ds: dP_ij = -P_ij s_i ds, with s_i row i's weight on the sink
          // (the seed may differ per query row when dense).
          const Vec& s = c.sink[b * H + h];
          Vec coef(T);
          for (int i = 0; i < T; ++i)
            coef(i) = -s(i) * (seed.broadcast ? seed.values(a, h) : seed.values(row + i, h));
          ob.noalias() += coef.asDiagonal() * (P * c.v.block(b * T, g * d, T, d));
        }
      }
    }
  return out;
}


// ---------------------------------------------------------------------------------------------
// The layer kind
// ---------------------------------------------------------------------------------------------

namespace kinds {
namespace {

constexpr const char* kRopeStyles[] = {"half", "interleaved", nullptr};
constexpr const char* kQkNorms[] = {"none", "layernorm", "rmsnorm", nullptr};
constexpr LayerOption kOptions[] = {
    {integer("num_heads", 4, 1, Limits::max_num_heads, "heads",
             "Number of attention heads; must divide the width."),
     &LayerConfig::num_heads},
    {integer("num_kv_heads", 0, 1, Limits::max_num_heads, "heads",
             "Key/value heads (grouped-query attention; 1: multi-query); must divide num_heads. Query "
             "head h reads key/value head h / (num_heads / num_kv_heads), as Hugging Face's repeat_kv.",
             "num_heads"),
     &LayerConfig::num_kv_heads},
    {flag("q_bias", true, "Adds a bias to the query projection."), &LayerConfig::q_bias},
    {flag("k_bias", true, "Adds a bias to the key projection."), &LayerConfig::k_bias},
    {flag("v_bias", true, "Adds a bias to the value projection."), &LayerConfig::v_bias},
    {flag("o_bias", true, "Adds a bias to the output projection."), &LayerConfig::o_bias},
    {flag("causal", false, "Lets each token attend only to itself and earlier tokens."),
     &LayerConfig::causal},
    {flag("sinks", false,
          "Adds one learned logit per head to every softmax row (attention sinks, as gpt-oss): each row's "
          "weights over the tokens then sum to less than 1."),
     &LayerConfig::sinks},
    {flag("rope", false, "Rotates queries and keys by position (RoPE); needs an even head dimension."),
     &LayerConfig::rope},
    {needs(integer("rotary_dim", 0, 2, Limits::max_features, "dimensions",
                   "With rope: how many leading dimensions of each head rotate (partial RoPE, as "
                   "GPT-NeoX and Pythia); even, at most the head dimension; omit it to rotate them all.",
                   "the head dimension"),
           "rope"),
     &LayerConfig::rotary_dim},
    {needs(choice("rope_style", kRopeStyles, 0,
                  "With rope: half rotates dimension i with i + r/2 (rotate_half: Llama, GPT-NeoX); "
                  "interleaved rotates 2i with 2i + 1 (GPT-J)."),
           "rope"),
     &LayerConfig::rope_style},
    {needs(number("rope_base", 10000, 1, true, 1e12,
                  "With rope: pair i turns by position * rope_base^(-2i/r) (Llama 10000, Qwen2 1000000)."),
           "rope"),
     &LayerConfig::rope_base},
    {choice("qk_norm", kQkNorms, 0,
            "Normalises every head's queries and keys over the head dimension after the projections and "
            "before RoPE, as Qwen3 (rmsnorm; layernorm also adds a shift): q_norm and k_norm, each one gain "
            "(and shift) of head_dim values shared by the heads, eps 1e-6."),
     &LayerConfig::qk_norm},
};

std::optional<Error> check(const LayerConfig& c, int in, const std::string& path) {
  if (in % c.num_heads != 0)
    return Error{path + ".num_heads", std::to_string(c.num_heads) + " does not divide features " + std::to_string(in)};
  const int head_dim = in / c.num_heads;
  if (c.num_kv_heads != 0 && c.num_heads % c.num_kv_heads != 0)
    return Error{path + ".num_kv_heads", std::to_string(c.num_kv_heads) + " does not divide num_heads " +
                                             std::to_string(c.num_heads)};
  if (!c.rope) return std::nullopt;  // the RoPE options need rope (Spec::needs_flag, checked by the parser)
  if (c.rotary_dim != 0) {
    if (c.rotary_dim % 2 != 0 || c.rotary_dim > head_dim)
      return Error{path + ".rotary_dim", "must be even and at most the head dimension " + std::to_string(head_dim) +
                                             " (features " + std::to_string(in) + " / " + std::to_string(c.num_heads) +
                                             " heads), got " + std::to_string(c.rotary_dim)};
    return std::nullopt;
  }
  if (head_dim % 2 != 0)
    return Error{path + ".rope", "rope needs an even head dimension, got " + std::to_string(head_dim) +
                                     " (features " + std::to_string(in) + " / " + std::to_string(c.num_heads) +
                                     " heads)"};
  return std::nullopt;
}

// q_proj, k_proj, v_proj, o_proj: weight (out, in) and bias (out, 1), as torch.nn.Linear; k and v
// are kv_heads * head_dim wide.
void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  const bool on[] = {c.q_bias, c.k_bias, c.v_bias, c.o_bias};
  const char* names[] = {"q_proj.", "k_proj.", "v_proj.", "o_proj."};
  const int kv = attention_kv_heads(c) * (in / c.num_heads);
  const int rows[] = {in, kv, kv, in}, cols[] = {in, in, in, in};
  // gpt-oss's `sinks`: one logit per head, bias-like (a learned additive term of the softmax). First,
  // as in its state dict (a module's own parameters before its submodules').
  if (c.sinks) ps.push_back({"sinks", ParamRole::bias, c.num_heads, 1, Init::shift, in});
  const int head_dim = in / c.num_heads;
  for (int i = 0; i < 4; ++i) {
    if (i == 3 && c.qk_norm != QkNorm::none)  // q_norm and k_norm (Qwen3's names), before o_proj's op
      for (const char* norm : {"q_norm.", "k_norm."}) {
        ps.push_back({std::string(norm) + "weight", ParamRole::gain, head_dim, 1, Init::gain, head_dim});
        if (c.qk_norm == QkNorm::layernorm)
          ps.push_back({std::string(norm) + "bias", ParamRole::shift, head_dim, 1, Init::shift, head_dim});
      }
    ps.push_back({std::string(names[i]) + "weight", ParamRole::weight, rows[i], cols[i], Init::fan_in, cols[i]});
    if (on[i]) ps.push_back({std::string(names[i]) + "bias", ParamRole::bias, rows[i], 1, Init::fan_in, cols[i]});
  }
}

void compile(CompileContext& ctx) {
  Op op = ctx.op(OpKind::attention);
  const int at = ctx.next();
  op.heads = ctx.cfg().num_heads;
  op.kv_heads = attention_kv_heads(ctx.cfg());
  op.causal = ctx.cfg().causal;
  op.rope = ctx.cfg().rope;
  op.rotary_dim = ctx.cfg().rotary_dim > 0 ? ctx.cfg().rotary_dim : ctx.node().in_width / op.heads;
  op.rope_interleaved = ctx.cfg().rope_style == RopeStyle::interleaved;
  op.rope_base = ctx.cfg().rope_base;
  op.sinks = ctx.param("sinks", at);
  op.wq = ctx.param("q_proj.weight", at);
  op.bq = ctx.param("q_proj.bias", at);
  op.wk = ctx.param("k_proj.weight", at);
  op.bk = ctx.param("k_proj.bias", at);
  op.wv = ctx.param("v_proj.weight", at);
  op.bv = ctx.param("v_proj.bias", at);
  op.qk_norm = ctx.cfg().qk_norm != QkNorm::none;
  op.qk_norm_kind = ctx.cfg().qk_norm == QkNorm::rmsnorm ? NormKind::rms : NormKind::layer;
  op.qn_gain = ctx.param("q_norm.weight", at);
  op.qn_shift = ctx.param("q_norm.bias", at);
  op.kn_gain = ctx.param("k_norm.weight", at);
  op.kn_shift = ctx.param("k_norm.bias", at);
  ctx.emit(op);
  // The output projection is an ordinary linear op, so trailing-linear analysis and folds treat
  // it like any Linear.
  Op o = ctx.op(OpKind::linear);
  o.w = ctx.param("o_proj.weight", at + 1);
  o.b = ctx.param("o_proj.bias", at + 1);
  ctx.emit(o);
}

std::string explain(const Op&, int) { return "feeds the projections of an attention layer"; }

// The q, k and v biases enter inside the layer: what the scores and softmax do to them.
std::string explain_own(const Op& op, const std::string& local, int k, int n) {
  if (local == "sinks")
    return std::string("a head's sink logit sets how much of each row's weight goes to no token: it scales the "
                       "head's output by a factor that differs per row") +
           (k > 0 ? "; what follows cancels part of that" : "");
  if (local == "k_norm.bias") {
    const int head_dim = op.in / op.heads;
    if (k == n)
      return "added to every normalised key of a head, it adds q_i . b to a whole score row; softmax is shift invariant";
    if (op.rope && k > 0 && op.rotary_dim < head_dim)
      return "RoPE rotates only the first " + std::to_string(op.rotary_dim) + " of each head's " +
             std::to_string(head_dim) + " dimensions: the shared key shift on the others adds q_i . b to a whole "
             "score row (softmax cancels it), on the rotated ones it varies along the row";
    if (op.rope) return "added to every normalised key of a head, then rotated by RoPE: q_i . R_j b varies along the row";
    if (op.sinks >= 0)
      return "adds q_i . b to every score of row i but not to the sink logit: the shift moves weight between the "
             "tokens and the sink";
    return "added to every normalised key of a head";
  }
  if (local == "q_norm.bias")
    return k > 0 ? "adds b . k_j to the scores; the normalised keys have zero mean over each head, so along "
                   "1 / k_norm.weight it adds the same amount to a whole row, which softmax cancels"
                 : "adds b . k_j to the scores, which varies with the key j";
  if ((local == "k_proj.bias" || local == "q_proj.bias") && op.qk_norm)
    return std::string("qk_norm normalises each head after the bias, so the bias changes the normalised ") +
           (local == "k_proj.bias" ? "keys differently per key" : "queries differently per query") +
           (k > 0 ? "; only each head's mean, which the LayerNorm subtracts, cancels" : "");
  if (local == "k_proj.bias" && op.sinks >= 0 && k == 0)
    return "adds q_i . b_K to every score of row i but not to the sink logit: the shift moves weight between "
           "the tokens and the sink, so softmax does not cancel it";
  if (local == "v_proj.bias" && op.sinks >= 0)
    return "with sinks the weights of row i over the tokens sum to 1 - p_sink(i) < 1, so token i gains "
           "(1 - p_sink(i)) W_O b_V, which varies per token: it does not fold into the output bias";
  if (local == "k_proj.bias") {
    const int head_dim = op.in / op.heads;
    if (op.rope && k > 0 && k < n && op.rotary_dim < head_dim)
      return "RoPE rotates only the first " + std::to_string(op.rotary_dim) + " of each head's " +
             std::to_string(head_dim) + " dimensions: the key bias on the others adds q_i . b_K to a "
             "whole score row (softmax cancels it), on the rotated ones it varies along the row";
    if (op.rope && k < n)
      return "RoPE rotates the key bias by each key's position, so q_i . R_j b_K varies along the row";
    return std::string("adds q_i . b_K to every score of row i") +
           (op.kv_heads < op.heads ? " (in each query head its group's key bias)" : "") +
           "; softmax is shift invariant" + (op.causal ? " (masked scores stay masked)" : "");
  }
  if (local == "q_proj.bias") return "adds b_Q . k_j to the scores, which varies with the key j";
  if (local == "v_proj.bias") {
    std::string s = op.kv_heads < op.heads
                        ? "softmax rows sum to 1, so every token gains W_O repeat_kv(b_V): it folds into the output bias"
                        : "softmax rows sum to 1, so every token gains W_O b_V: it folds into the output bias";
    if (k > 0) s += "; what follows cancels the part of W_O b_V it cannot see";
    return s;
  }
  return "";  // o_proj.bias: after the layer, like any Linear's
}

// q, k and v read the input; o_proj writes the output.
constexpr Projection kReads[] = {{"q_proj.", &LayerConfig::q_bias}, {"k_proj.", &LayerConfig::k_bias},
                                 {"v_proj.", &LayerConfig::v_bias}};
constexpr Projection kWrites{"o_proj.", &LayerConfig::o_bias};
constexpr FoldTraits kFolds{kReads, &kWrites};

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("attention");
  if (n.cfg.qk_norm == QkNorm::rmsnorm) needs.add("rmsnorm");
  const LayerConfig& c = n.cfg;
  return "Attention(" + std::to_string(n.in_width) + ", num_heads=" + std::to_string(c.num_heads) +
         (c.num_kv_heads ? ", num_kv_heads=" + std::to_string(c.num_kv_heads) : "") + ", q_bias=" + py_bool(c.q_bias) + ", k_bias=" + py_bool(c.k_bias) + ", v_bias=" + py_bool(c.v_bias) +
         ", o_bias=" + py_bool(c.o_bias) + ", causal=" + py_bool(c.causal) + ", rope=" + py_bool(c.rope) +
         (c.rotary_dim ? ", rotary_dim=" + std::to_string(c.rotary_dim) : "") +
         (c.rope_style == RopeStyle::interleaved ? ", rope_style=\"interleaved\"" : "") +
         (c.rope_base != 10000.0 ? ", rope_base=" + py_float(c.rope_base) : "") + (c.sinks ? ", sinks=True" : "") +
         (c.qk_norm == QkNorm::none ? "" : c.qk_norm == QkNorm::layernorm ? ", qk_norm=\"layernorm\"" : ", qk_norm=\"rmsnorm\"") + ")";
}

}  // namespace

extern const LayerKind attention{LayerType::attention, "attention",
                                 "Multi-head self-attention with query, key, value and output projections.",
                                 kOptions, check, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds, explain_own};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter attention_torch = torch;

}  // namespace kinds

}  // namespace biaslab
