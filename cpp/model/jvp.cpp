// The JVP driver: carries a batch of tangents through the ops, in broadcast form while it can.
// Each op family's derivative lives with the layer kinds that use it (cpp/layers).
#include "model/jvp.hpp"

#include "layers/conv.hpp"
#include "layers/glu.hpp"
#include "layers/norm.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace biaslab {

using jvp_detail::Tangent;
using jvp_detail::expand;
using jvp_detail::add;

Mat op_jvp(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n) {
  const Eigen::Index N = x.rows();
  switch (op.kind) {
    case OpKind::linear:
      return dx * m.params[op.w].value.transpose();
    case OpKind::conv:
      return conv_forward<double>(op, m.params[op.w].value, nullptr, dx);
    case OpKind::position:
      return dx;
    case OpKind::norm:
      return norm_jvp(m, op, x, dx, n);
    case OpKind::activation: {
      const Mat g = op.act->derivative(x);
      Mat dy = dx;
      for (int a = 0; a < n; ++a) dy.middleRows(a * N, N).array() *= g.array();
      return dy;
    }
    case OpKind::softmax:
      return softmax_jvp(x, dx, n);
    case OpKind::attention:
    case OpKind::glu:
    case OpKind::residual_begin:
    case OpKind::residual_end:
    case OpKind::branch_next:
      break;
  }
  return dx;
}

namespace {

// A seed on a position table (T * F entries, flat) as the tangent it adds to the tokens: token r
// (position r % T) gets the direction's row r % T. A broadcast seed holds one direction per row
// (n, T * F); a per-token one (n * N, T * F) a direction for each token.
Mat position_seed(const Seed& seed, int n, Eigen::Index N, int T, int F) {
  Mat out(Eigen::Index(n) * N, F);
  for (int a = 0; a < n; ++a)
    for (Eigen::Index r = 0; r < N; ++r) {
      const Eigen::Index row = seed.broadcast ? a : Eigen::Index(a) * N + r;
      out.row(Eigen::Index(a) * N + r) = seed.values.block(row, (r % T) * F, 1, F);
    }
  return out;
}

// A tangent batch whose row a*N + r has at most one nonzero entry, s(a*N + r) in column col[a]
// (-1: the row is zero): unit bias directions through an elementwise activation, as after an
// MLP's first Linear. A Linear then costs one scaled column of its weight per row instead of a
// product with a (n*N, in) matrix of zeros. The values are the ones the dense form would hold,
// computed in the same order, so the results are the same values: the dense product adds only
// exact zeros to the one nonzero term (a zero may carry the other sign: -0 where the dense sum
// gives +0, which no comparison sees).
struct OneHot {
  Eigen::VectorXd s;
  std::vector<int> col;
};

// The column of each row of a broadcast batch (n, F) that has at most one nonzero per row (-1:
// a zero row); nullopt if some row has two.
std::optional<std::vector<int>> one_hot_columns(const Mat& v) {
  std::vector<int> col(static_cast<size_t>(v.rows()), -1);
  for (Eigen::Index a = 0; a < v.rows(); ++a)
    for (Eigen::Index j = 0; j < v.cols(); ++j)
      if (v(a, j) != 0.0) {
        if (col[a] >= 0) return std::nullopt;
        col[a] = static_cast<int>(j);
      }
  return col;
}

// An activation's derivative at x (N, F) in the columns `col` only, one column per direction:
// it is elementwise, so these are the values its full (N, F) derivative has there, at a cost of
// N per direction instead of N * F per call (a chunk of one direction in a 4096-wide MLP over
// 256 tokens evaluated 1 M derivatives for 256).
Mat derivative_at(const Activation& act, const Mat& x, const std::vector<int>& col) {
  Mat xs(x.rows(), static_cast<Eigen::Index>(col.size()));
  for (size_t a = 0; a < col.size(); ++a) xs.col(static_cast<Eigen::Index>(a)) = x.col(std::max(col[a], 0));
  return act.derivative(xs);
}

// A broadcast batch (n, F) with one-hot rows in columns `col`, through an activation whose
// derivative there is g (N, n): the dense form's expand-then-multiply, entry by entry.
OneHot one_hot_activation(const Mat& v, std::vector<int> col, const Mat& g) {
  const Eigen::Index n = v.rows(), N = g.rows();
  OneHot h{Eigen::VectorXd::Zero(n * N), std::move(col)};
  for (Eigen::Index a = 0; a < n; ++a)
    if (const int c = h.col[a]; c >= 0)
      for (Eigen::Index r = 0; r < N; ++r) h.s(a * N + r) = v(a, c) * g(r, a);
  return h;
}

// One-hot rows through an activation whose derivative at their columns is g (N, n): the dense
// form's dy *= g, entry by entry.
void one_hot_scale(OneHot& h, const Mat& g) {
  const Eigen::Index N = g.rows();
  for (size_t a = 0; a < h.col.size(); ++a)
    if (h.col[a] >= 0)
      for (Eigen::Index r = 0; r < N; ++r) h.s(Eigen::Index(a) * N + r) *= g(r, static_cast<Eigen::Index>(a));
}

// One-hot rows through a Linear with weight W (out, in): row i is s(i) * W(:, col)^T.
Mat one_hot_linear(const OneHot& h, const Mat& W, Eigen::Index N) {
  Mat out = Mat::Zero(h.s.size(), W.rows());
  Eigen::RowVectorXd column(W.rows());
  for (size_t a = 0; a < h.col.size(); ++a)
    if (const int c = h.col[a]; c >= 0) {
      column = W.col(c).transpose();  // contiguous, once per direction
      for (Eigen::Index r = 0; r < N; ++r) {
        const Eigen::Index i = Eigen::Index(a) * N + r;
        out.row(i) = h.s(i) * column;
      }
    }
  return out;
}

// One-hot rows as the dense (n*N, F) batch they stand for.
Mat one_hot_dense(const OneHot& h, Eigen::Index N, Eigen::Index F) {
  Mat out = Mat::Zero(h.s.size(), F);
  for (size_t a = 0; a < h.col.size(); ++a)
    if (const int c = h.col[a]; c >= 0)
      for (Eigen::Index r = 0; r < N; ++r) out(Eigen::Index(a) * N + r, c) = h.s(Eigen::Index(a) * N + r);
  return out;
}

}  // namespace

bool keeps_broadcast(const Op& op) {
  switch (op.kind) {
    case OpKind::linear:
    case OpKind::residual_begin:
    case OpKind::residual_end:
    case OpKind::branch_next:
    case OpKind::position:
      return true;
    case OpKind::norm:
      return op.norm == NormKind::batch_eval;
    default:
      return false;
  }
}

bool acts_per_token(const Op& op) {
  switch (op.kind) {
    case OpKind::attention:
    case OpKind::conv:
      return false;
    case OpKind::norm:
      return op.norm == NormKind::layer || op.norm == NormKind::rms || op.norm == NormKind::batch_eval;
    default:
      return true;
  }
}

TokenRows take_rows(const Trace& trace, int at, int stop, std::vector<Eigen::Index> rows) {
  TokenRows t;
  t.at = at;
  t.rows = std::move(rows);
  for (int i = at; i < stop; ++i) {
    const Mat& x = trace.inputs[static_cast<size_t>(i)];
    Mat rows(static_cast<Eigen::Index>(t.rows.size()), x.cols());
    for (size_t j = 0; j < t.rows.size(); ++j) rows.row(static_cast<Eigen::Index>(j)) = x.row(t.rows[j]);
    t.inputs.push_back(std::move(rows));
  }
  return t;
}

namespace {
// Rows `rows` of each direction's N rows of a dense batch (n*N, F).
Mat gather_rows(const Mat& v, Eigen::Index N, const std::vector<Eigen::Index>& rows) {
  const Eigen::Index n = v.rows() / N, k = static_cast<Eigen::Index>(rows.size());
  Mat out(n * k, v.cols());
  for (Eigen::Index a = 0; a < n; ++a)
    for (Eigen::Index j = 0; j < k; ++j) out.row(a * k + j) = v.row(a * N + rows[static_cast<size_t>(j)]);
  return out;
}
}  // namespace

namespace {

// jvp() from op `start` on. With `init` (tokens rows only: `sub` set and start >= sub->at), that
// tangent enters op `start` and no seed is added (seed.param = -1): the per-token map of ops
// [start, stop) applied to it (tail_jacobian).
Mat run_jvp(const Model& m, const Trace& trace, const Seed& seed, int n, int start, int stop, bool* broadcast,
            const TokenRows* sub, const Mat* init) {
  Eigen::Index N = init ? static_cast<Eigen::Index>(sub->rows.size()) : trace.inputs[0].rows();
  // Open blocks: the tangent of the input and, for a parallel block, of the running sum of
  // finished branches (model/forward.cpp); blocks opened before `start` carry no tangent.
  struct Skip {
    std::optional<Tangent> input, sum;
    bool parallel = false;
  };
  std::vector<Skip> skips;
  for (int i = 0; i < start; ++i) {
    if (m.ops[i].kind == OpKind::residual_begin) skips.push_back({std::nullopt, std::nullopt, m.ops[i].parallel});
    if (m.ops[i].kind == OpKind::residual_end) skips.pop_back();
  }
  std::optional<Tangent> d;  // nullopt: exactly zero
  if (init) d = Tangent{*init, false};
  auto add_seed = [&](int p) {
    if (p < 0 || p != seed.param) return;
    const Tangent s{seed.values, seed.broadcast};
    d = d ? add(*d, s, N) : s;
  };
  auto per_token = [&]() {  // the op treats tokens differently: leave broadcast form
    if (d && d->broadcast) d = Tangent{expand(d->v, N), false};
  };
  std::optional<OneHot> hot;  // when set, d is this batch of one-hot rows (d itself unset)
  // From sub->at on, only the rows sub->rows of every direction (broadcast tangents stay as they
  // are: every row of theirs is the same).
  auto take = [&](std::optional<Tangent>& t) {
    if (t && !t->broadcast) t->v = gather_rows(t->v, N, sub->rows);
  };
  for (int i = start; i < stop; ++i) {
    const Op& op = m.ops[i];
#ifndef BIASLAB_LEAN_ENGINE  // (the page's first-load engine has no token rows: sub is null)
    if (sub && i == sub->at && !init) {
      take(d);
      for (Skip& s : skips) {
        take(s.input);
        take(s.sum);
      }
      if (hot) {
        const Eigen::Index k = static_cast<Eigen::Index>(sub->rows.size());
        Eigen::VectorXd s(Eigen::Index(n) * k);
        for (Eigen::Index a = 0; a < n; ++a)
          for (Eigen::Index j = 0; j < k; ++j) s(a * k + j) = hot->s(a * N + sub->rows[static_cast<size_t>(j)]);
        hot->s = std::move(s);
      }
      N = static_cast<Eigen::Index>(sub->rows.size());
    }
    // From sub->tail_at on, the ops' per-token map is known (TokenRows::tail): it applies to the
    // tangent entering there when that is the only one (no open block's skip carries one), after
    // the seed has entered, and unless the ops would keep a broadcast tangent in its compact
    // form, which the caller asked for (the matrices give every row its own).
    if (sub && sub->tail && i == sub->tail_at && i > start && i >= sub->at && !init &&
        std::none_of(skips.begin(), skips.end(), [](const Skip& s) { return s.input || s.sum; }) &&
        !(broadcast && d && d->broadcast &&
          std::all_of(m.ops.begin() + i, m.ops.begin() + stop, [](const Op& o) { return keeps_broadcast(o); }))) {
      if (sub->tail->size() != sub->rows.size()) throw std::invalid_argument("jvp: a shared tail needs one matrix per row");
      if (hot) {
        d = Tangent{one_hot_dense(*hot, N, op.in), false};
        hot.reset();
      }
      const Eigen::Index k = N;
      const Eigen::Index w = (*sub->tail)[0].rows();
      Mat out = Mat::Zero(Eigen::Index(n) * k, w);
      if (d) {
        Mat g(n, d->v.cols());
        for (Eigen::Index j = 0; j < k; ++j) {
          const Mat& A = (*sub->tail)[static_cast<size_t>(j)];
          if (d->broadcast) {
            g = d->v;
          } else {
            for (Eigen::Index a = 0; a < n; ++a) g.row(a) = d->v.row(a * k + j);
          }
          const Mat y = g * A.transpose();
          for (Eigen::Index a = 0; a < n; ++a) out.row(a * k + j) = y.row(a);
        }
      }
      d = Tangent{std::move(out), false};
      break;
    }
#endif
#ifndef BIASLAB_LEAN_ENGINE
    const Mat& x = sub && i >= sub->at ? sub->inputs[static_cast<size_t>(i - sub->at)] : trace.inputs[i];
#else
    const Mat& x = trace.inputs[i];
#endif
    if (op.kind == OpKind::activation && hot) {
      one_hot_scale(*hot, derivative_at(*op.act, x, hot->col));
      continue;
    }
    if (op.kind == OpKind::activation && d && d->broadcast) {
      if (auto col = one_hot_columns(d->v)) {
        const Mat g = derivative_at(*op.act, x, *col);
        hot = one_hot_activation(d->v, std::move(*col), g);
        d.reset();
        continue;
      }
    }
    if (hot) {  // any other op takes the batch as it is
      d = op.kind == OpKind::linear ? Tangent{one_hot_linear(*hot, m.params[op.w].value, N), false}
                                    : Tangent{one_hot_dense(*hot, N, op.in), false};
      hot.reset();
      if (op.kind == OpKind::linear) {
        add_seed(op.b);
        continue;
      }
    }
    switch (op.kind) {
      case OpKind::residual_begin:
        if (op.parallel) skips.push_back({d, d, true});
        else skips.push_back({d, std::nullopt, false});
        break;
      case OpKind::branch_next: {
        Skip& s = skips.back();
        if (d) s.sum = s.sum ? add(*s.sum, *d, N) : *d;
        d = s.input;
        break;
      }
      case OpKind::residual_end: {
        std::optional<Tangent> s = std::move(skips.back().parallel ? skips.back().sum : skips.back().input);
        skips.pop_back();
        if (s) d = d ? add(*d, *s, N) : *s;
        break;
      }
      case OpKind::attention:
        if (d || attention_takes_seed(op, seed.param)) {
          Mat t = attention_jvp(m, op, x, trace.attention[i], d ? &*d : nullptr, seed, n);
          if (t.size() == 0) d.reset();  // exactly zero: the ops after it have nothing to carry
          else d = Tangent{std::move(t), false};
        }
        break;
      case OpKind::glu:
#ifndef BIASLAB_LEAN_ENGINE
        if (d && !d->broadcast && !glu_takes_seed(op, seed.param) && n >= kGluPerTokenDirections) {
          d = Tangent{glu_jvp_per_token(m, op, x, d->v, n), false};
          break;
        }
#endif
        if (d || glu_takes_seed(op, seed.param))
          d = Tangent{glu_jvp(m, op, x, d ? &*d : nullptr, seed, n), false};
        break;
      case OpKind::linear:  // token-independent: keeps broadcast form
#ifndef BIASLAB_LEAN_ENGINE
        // Unit directions (a norm's shift, a Linear's bias into the next Linear): each row picks
        // one column of W, the product's own values (its other terms are exact zeros).
        if (d && d->broadcast && d->v.rows() >= 16) {
          if (const auto col = one_hot_columns(d->v)) {
            const Mat& W = m.params[op.w].value;
            Mat v = Mat::Zero(d->v.rows(), W.rows());
            for (Eigen::Index a = 0; a < v.rows(); ++a)
              if ((*col)[static_cast<size_t>(a)] >= 0) {
                const int j = (*col)[static_cast<size_t>(a)];
                v.row(a) = d->v(a, j) * W.col(j).transpose();
              }
            d->v = std::move(v);
            add_seed(op.b);
            break;
          }
        }
#endif
        if (d) d->v = Mat(d->v * m.params[op.w].value.transpose());  // moved in, not copied
        add_seed(op.b);
        break;
      case OpKind::conv:  // mixes tokens, and its zero padding shifts the borders
        per_token();
        if (d) d->v = conv_forward<double>(op, m.params[op.w].value, nullptr, d->v);
        add_seed(op.b);
        break;
      case OpKind::position:  // x + table: a tangent passes; the table's own enters per token
        if (op.b == seed.param) {
          const Tangent s{position_seed(seed, n, N, m.tokens, op.in), false};
          d = d ? add(*d, s, N) : s;
        }
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
  if (hot) d = Tangent{one_hot_dense(*hot, N, width), false};
  if (broadcast) *broadcast = d && d->broadcast;
  if (broadcast && *broadcast) return d->v;
  if (!d) return Mat::Zero(Eigen::Index(n) * N, width);
  return d->broadcast ? expand(d->v, N) : std::move(d->v);
}

}  // namespace

Mat jvp(const Model& m, const Trace& trace, const Seed& seed, int n, int stop, bool* broadcast, const TokenRows* sub) {
  if (sub && !seed.broadcast) throw std::invalid_argument("jvp: token rows need a broadcast seed");
  return run_jvp(m, trace, seed, n, m.params[seed.param].op, stop, broadcast, sub, nullptr);
}

#ifndef BIASLAB_LEAN_ENGINE
namespace {

// Composing a row's map op by op, right to left in the chain of its factors, instead of pushing
// the width's unit vectors through the ops: until the first Linear the map is diag(s) - P Q^T
// (norms add their removed directions U, activations and gains scale rows), so the first Linear
// costs a scaling of its weight and a product with a few columns, not a product with a dense
// matrix. A pre-norm MLP block and a final norm (GPT-2's tail after attention) then cost one
// product of the block's two widths where the unit vectors cost two.
struct RowMap {
  bool dense = false;
  Vec s;     // (structured) the diagonal
  Mat P, Q;  // (structured) the low-rank part P Q^T, Q: (width at from, k)
  Mat T;     // (dense) the map
  void add(const RowMap& o) {
    if (!dense && !o.dense) {
      s += o.s;
      Mat p(P.rows(), P.cols() + o.P.cols()), q(Q.rows(), Q.cols() + o.Q.cols());
      p << P, o.P;
      q << Q, o.Q;
      P = std::move(p);
      Q = std::move(q);
      return;
    }
    Mat other = o.to_dense();
    if (!dense) {
      T = to_dense();
      dense = true;
    }
    T += other;
  }
  Mat to_dense() const {
    if (dense) return T;
    Mat t = -P * Q.transpose();
    t.diagonal() += s;
    return t;
  }
  void scale_rows(const Vec& g) {
    if (dense) {
      T = g.asDiagonal() * T;
    } else {
      s = s.cwiseProduct(g);
      P = g.asDiagonal() * P;
    }
  }
};

// Whether compose_tail knows every op of [from, stop): Linears, activations, per-token norms
// (and BatchNorm in eval mode), position tables, residual blocks that are not parallel.
bool composable(const Model& m, int from, int stop) {
  for (int i = from; i < stop; ++i) {
    const Op& op = m.ops[static_cast<size_t>(i)];
    switch (op.kind) {
      case OpKind::linear:
      case OpKind::activation:
      case OpKind::position:
        break;
      case OpKind::norm:
        if (op.norm != NormKind::layer && op.norm != NormKind::rms && op.norm != NormKind::batch_eval) return false;
        break;
      case OpKind::residual_begin:
      case OpKind::residual_end:
        if (op.parallel) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

std::vector<Mat> compose_tail(const Model& m, const TokenRows& sub, int from, int stop) {
  const Eigen::Index k = static_cast<Eigen::Index>(sub.rows.size());
  const int w_in = m.ops[static_cast<size_t>(from)].in;
  std::vector<Mat> out(static_cast<size_t>(k));
  Mat U;
  for (Eigen::Index j = 0; j < k; ++j) {
    RowMap t;
    t.s = Vec::Ones(w_in);
    t.P = Mat(w_in, 0);
    t.Q = Mat(w_in, 0);
    std::vector<RowMap> skips;  // blocks opened from `from` on (one opened before carries nothing)
    for (int i = from; i < stop; ++i) {
      const Op& op = m.ops[static_cast<size_t>(i)];
      const Mat& x = sub.inputs[static_cast<size_t>(i - sub.at)];
      switch (op.kind) {
        case OpKind::residual_begin:
          skips.push_back(t);
          break;
        case OpKind::residual_end:
          if (!skips.empty()) {
            t.add(skips.back());
            skips.pop_back();
          }
          break;
        case OpKind::linear: {
          const Mat& W = m.params[static_cast<size_t>(op.w)].value;
          if (t.dense) {
            t.T = W * t.T;
          } else {
            t.T = W * t.s.asDiagonal();
            if (t.P.cols() > 0) t.T.noalias() -= (W * t.P) * t.Q.transpose();
            t.dense = true;
          }
          break;
        }
        case OpKind::activation:
          t.scale_rows(op.act->derivative(x.row(j)).row(0).transpose());
          break;
        case OpKind::norm: {
          Vec g = op.gain >= 0 ? Vec(m.params[static_cast<size_t>(op.gain)].value.col(0)) : Vec::Ones(op.in);
          if (op.norm == NormKind::batch_eval) {
            const Mat& rv = m.params[static_cast<size_t>(op.var)].value;
            for (Eigen::Index f = 0; f < g.size(); ++f) g(f) /= std::sqrt(rv(f, 0) + op.eps);
            t.scale_rows(g);
            break;
          }
          const double r = token_norm_factors(op, x.row(j), &U);
          g *= r;
          // gain * r * (I - U U^T) applied to the map
          if (t.dense) {
            t.T -= U * (U.transpose() * t.T);
            t.T = g.asDiagonal() * t.T;
          } else {
            const Eigen::Index u = U.cols(), p = t.P.cols();
            Mat P(w_in, u + p), Q(w_in, u + p);
            P.leftCols(u) = g.asDiagonal() * U;
            P.rightCols(p) = g.asDiagonal() * (t.P - U * (U.transpose() * t.P));
            Q.leftCols(u) = t.s.asDiagonal() * U;
            Q.rightCols(p) = t.Q;
            t.s = t.s.cwiseProduct(g);
            t.P = std::move(P);
            t.Q = std::move(Q);
          }
          break;
        }
        default:  // a position table adds nothing to a tangent
          break;
      }
    }
    out[static_cast<size_t>(j)] = t.to_dense();
  }
  return out;
}

}  // namespace

std::vector<Mat> tail_jacobian(const Model& m, const Trace& trace, const TokenRows& sub, int from, int stop,
                               int chunk) {
  if (from < sub.at || from >= stop) throw std::invalid_argument("tail_jacobian: from outside the rows' ops");
  if (composable(m, from, stop)) return compose_tail(m, sub, from, stop);
  const Eigen::Index k = static_cast<Eigen::Index>(sub.rows.size());
  const int w_in = m.ops[static_cast<size_t>(from)].in;
  const int w_out = stop < static_cast<int>(m.ops.size()) ? m.ops[static_cast<size_t>(stop)].in : m.out_features;
  std::vector<Mat> A(static_cast<size_t>(k), Mat(w_out, w_in));
  const Seed none{-1, Mat(), true};
  chunk = std::max(1, std::min(chunk, w_in));
  for (int a0 = 0; a0 < w_in; a0 += chunk) {
    const int c = std::min(chunk, w_in - a0);
    // Direction a is the unit vector e_(a0 + a) on every row: row a * k + j of the result is
    // column a0 + a of row j's map.
    Mat init = Mat::Zero(Eigen::Index(c) * k, w_in);
    for (int a = 0; a < c; ++a)
      for (Eigen::Index j = 0; j < k; ++j) init(Eigen::Index(a) * k + j, a0 + a) = 1.0;
    const Mat y = run_jvp(m, trace, none, c, from, stop, nullptr, &sub, &init);
    for (int a = 0; a < c; ++a)
      for (Eigen::Index j = 0; j < k; ++j) A[static_cast<size_t>(j)].col(a0 + a) = y.row(Eigen::Index(a) * k + j).transpose();
  }
  return A;
}

Mat jvp_rows(const Model& m, const Trace& trace, const TokenRows& sub, int from, int stop, const Mat& init, int n) {
  if (from < sub.at || from > stop) throw std::invalid_argument("jvp_rows: from outside the rows' ops");
  const Seed none{-1, Mat(), true};
  return run_jvp(m, trace, none, n, from, stop, nullptr, &sub, &init);
}
#endif

Eigen::Index seed_rows(const Model& m, int param, Eigen::Index N) {
  const Op& op = m.ops[static_cast<size_t>(m.params[static_cast<size_t>(param)].op)];
  const bool context_side = op.kind == OpKind::attention && op.context > 0 &&
                            (param == op.bk || param == op.bv || param == op.kn_shift);
  return context_side ? m.context_rows() : N;
}

int trailing_cut(const Model& m, int start) {
  const int end = static_cast<int>(m.ops.size());
  int best = end;
  int open = 0;  // residual ends in the suffix whose begin lies after `start` and is not included
  for (int c = end - 1; c > start; --c) {
    const Op& op = m.ops[c];
    // A parallel block is never part of the linear tail: where the seed is inside it, the tangent
    // at a cut would miss the branches' sum.
    const bool linear_op = op.kind == OpKind::linear ||
                           (op.kind == OpKind::norm && op.norm == NormKind::batch_eval) ||
                           ((op.kind == OpKind::residual_begin || op.kind == OpKind::residual_end) && !op.parallel);
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
