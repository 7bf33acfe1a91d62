// The invariance probes the theory predicts, each on one op and its actual input.
#include <algorithm>
#include <numeric>

#include "analysis/analysis.hpp"
#include "core/cold.hpp"
#include "layers/norm.hpp"
#include "model/forward.hpp"
#include "core/rng.hpp"

namespace biaslab::analysis {
namespace {

// Permutes the tokens of each of the `batch` samples in rows [first, first + batch * T); the
// other rows (a model's context after its input, or its input before the context) stay.
template <class S>
MatT<S> permute_tokens(const MatT<S>& x, const std::vector<int>& perm, int batch, Eigen::Index first = 0) {
  const int T = static_cast<int>(perm.size());
  MatT<S> y = x;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < T; ++t) y.row(first + b * T + t) = x.row(first + b * T + perm[t]);
  return y;
}

// A random permutation of T tokens that moves at least one (T > 1).
std::vector<int> draw_permutation(std::uint64_t seed, const char* stream, int T) {
  std::vector<int> perm(T);
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed, stream);
  for (int i = T - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int>(rng.next() % (i + 1))]);
  bool identity = true;
  for (int t = 0; t < T; ++t) identity = identity && perm[t] == t;
  if (identity && T > 1) std::swap(perm[0], perm[1]);
  return perm;
}

}  // namespace

BIASLAB_COLD std::vector<Probe> analyse_invariances(Context& c) {
  c.step("invariances", 0.65);
  const Model& m = c.model;
  const int B = m.batch, T = m.tokens;
  std::vector<Probe> probes;
  Trace trace;
  forward<double>(m, c.ev->weights64(), c.ev->input(), {}, &trace);
  // A random permutation that moves at least one token (with one token none exists, and the
  // permutation probes are left out); another for the context's tokens.
  const std::vector<int> perm = draw_permutation(c.cfg.seed, "permutation", T);
  const bool can_permute = T > 1;
  const int Tc = m.context_tokens;
  const std::vector<int> cperm = draw_permutation(c.cfg.seed, "context permutation", Tc);
  const auto& wf = c.ev->weights32();
  const auto& wd = c.ev->weights64();
  const DType dt = m.dtype;
  bool positional = false, conv = false;  // conv: a kernel wider than one token
  bool table = false;                     // a position table is added
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    const Mat& xd = trace.inputs[i];
    const MatT<float> xf = xd.cast<float>();
    if (op.kind == OpKind::attention) positional = positional || op.causal || op.rope;
    // A table gives tokens positions unless its bias row found all of it redundant (a LayerNorm
    // over one feature cancels it whole).
    if (op.kind == OpKind::position) {
      bool cancelled = false;
      for (size_t b = 0; b < c.bias_params.size() && b < c.structures.size(); ++b)
        if (c.bias_params[b] == op.b)
          cancelled = c.structures[b].determined && c.structures[b].redundant_dim == c.structures[b].size;
      table = table || !cancelled;
    }
    if (op.kind == OpKind::conv && op.kernel_h * op.kernel_w > 1) conv = true;
    // What keys and values read: the input (self-attention) or the context, and its permutation.
    const bool cross = op.kind == OpKind::attention && op.context > 0;
    const std::vector<int>& kperm = cross ? cperm : perm;
    if (op.kind == OpKind::attention && (kperm.size() > 1 || can_permute)) {
      const std::string exp_note = op.causal ? "a causal mask breaks it" : op.rope ? "RoPE breaks it" : "";
      const Mat& kd = cross ? trace.context : xd;
      const MatT<float> kf = kd.cast<float>();
      const Eval base = combine_eval(dt, attention_core<float>(m, op, wf, xf, kf, B),
                                     attention_core<double>(m, op, wd, xd, kd, B));
      if (kperm.size() > 1) {
        // Keys and values permuted together: the output does not change.
        const Eval kv = combine_eval(dt, attention_core<float>(m, op, wf, xf, permute_tokens(kf, kperm, B), B),
                                     attention_core<double>(m, op, wd, xd, permute_tokens(kd, kperm, B), B));
        probes.push_back({cross ? "attention: permute the context's tokens" : "attention: permute keys and values together",
                          op.layer, cross ? "y -> P y (keys and values read the context y)" : "x_kv -> P x_kv",
                          op.causal || op.rope ? "changes" : "invariant", exp_note, Evaluator::compare(base, kv)});
      }
      if (can_permute) {
        const MatT<float> pf = permute_tokens(xf, perm, B);
        const Mat pd = permute_tokens(xd, perm, B);
        // Queries permuted: the output rows permute the same way.
        Eval q = combine_eval(dt, attention_core<float>(m, op, wf, pf, kf, B),
                              attention_core<double>(m, op, wd, pd, kd, B));
        Eval base_p = base;
        base_p.y = permute_tokens(base.y, perm, B);
        base_p.y_other = permute_tokens(base.y_other, perm, B);
        probes.push_back({"attention: permute queries", op.layer, "x_q -> P x_q, compared with P out",
                          op.causal || op.rope ? "changes" : "equivariant", exp_note, Evaluator::compare(base_p, q)});
      }
    }
    if (op.kind == OpKind::norm) {
      // Shift and scale of the input, over the elements that share statistics.
      Rng rng(c.cfg.seed, "probe." + op.layer);
      const int N = static_cast<int>(xd.rows()), F = static_cast<int>(xd.cols());
      Mat shift(N, F), scale(N, F);
      // The shift on a grid: x is rounded to 2^-21 of its largest entry's binade and c (|c| up to
      // that binade) lies on the same grid, so x and x + c are exact in float32 and float64
      // alike. The probe then adds no rounding of its own, which a near-constant set would
      // amplify beyond what the floor measures, and both precisions see exactly the inputs the
      // law compares.
      const double amax = xd.cwiseAbs().maxCoeff();
      int binade = 0;
      if (std::isfinite(amax)) std::frexp(amax, &binade);  // max |x| < 2^binade
      const double grid = std::ldexp(1.0, binade - 21), unit = std::ldexp(1.0, binade - 1);
      const Mat xs = std::isfinite(amax) ? Mat(((xd / grid).array().round() * grid).matrix()) : xd;
      const Vec cs = Vec::NullaryExpr(std::max(N, F) * 4, [&]() { return std::round(rng.uniform(-2.0, 2.0) * unit / grid) * grid; });
      // Powers of two: scaling by them is exact in floating point, so the probe adds no rounding
      // of its own (near-constant sets would amplify it) and tests the law itself.
      const double pow2[] = {0.25, 0.5, 2.0, 4.0};
      const Vec ss = Vec::NullaryExpr(std::max(N, F) * 4, [&]() { return pow2[rng.next() % 4]; });
      const std::string what = norm_set_words(op);
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          const int set = norm_set(op, r, f, T, F);
          shift(r, f) = cs(set % cs.size());
          scale(r, f) = ss(set % ss.size());
        }
      Op exact = op;
      exact.eps = 0;  // eps > 0 breaks exact scale invariance; the probe checks the eps-free law
      auto run = [&](const Op& o, const Mat& in) {
        const MatT<float> inf = in.cast<float>();
        return combine_eval(dt, op_forward<float>(m, o, wf, inf), op_forward<double>(m, o, wd, in));
      };
      const bool centred = norm_centres(op), scaled = norm_scales(op);
      probes.push_back({"norm: shift the input " + what, op.layer, "x -> x + c", centred ? "invariant" : "changes",
                        "", Evaluator::compare(run(op, xs), run(op, xs + shift))});
      probes.push_back({"norm: scale the input " + what, op.layer, "x -> s x (s in 1/4, 1/2, 2, 4)",
                        scaled ? "invariant" : "changes",
                        "eps set to 0 (eps > 0 breaks exact scale invariance; a constant set then normalises to 0)",
                        Evaluator::compare(run(exact, xd), run(exact, Mat(xd.cwiseProduct(scale))))});
    }
  }
  // The whole model: permuting tokens permutes the output unless positions enter somewhere.
  if (can_permute) {
    const Mat pd = permute_tokens(c.ev->input(), perm, B);
    const MatT<float> pf = pd.cast<float>();
    const Eval out = combine_eval(dt, forward<float>(m, wf, pf), forward<double>(m, wd, pd));
    Eval base_p = c.ev->base();
    base_p.y = permute_tokens(base_p.y, perm, B);
    base_p.y_other = permute_tokens(base_p.y_other, perm, B);
    probes.push_back({"model: permute tokens", "model", "x -> P x, compared with P out",
                      positional || conv || table ? "changes" : "equivariant",
                      conv     ? "a convolution reads each token's neighbours"
                      : table  ? "a position embedding gives tokens positions"
                      : positional ? "a causal mask or RoPE gives tokens positions" : "",
                      Evaluator::compare(base_p, out)});
  }
  // Permuting the context's tokens changes nothing: cross-attention reads them as a set.
  if (Tc > 1) {
    const Mat pd = permute_tokens(c.ev->input(), cperm, B, Eigen::Index(B) * T);
    const MatT<float> pf = pd.cast<float>();
    const Eval out = combine_eval(dt, forward<float>(m, wf, pf), forward<double>(m, wd, pd));
    probes.push_back({"model: permute the context's tokens", "model", "y -> P y", "invariant", "",
                      Evaluator::compare(c.ev->base(), out)});
  }
  return probes;
}

}  // namespace biaslab::analysis
