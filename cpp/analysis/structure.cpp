#include "analysis/structure.hpp"
#include "layers/attention.hpp"
#include "layers/glu.hpp"
#include "layers/norm.hpp"
#include "layers/ops.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "core/cold.hpp"
#include "core/rng.hpp"

namespace biaslab {

namespace {

// A gated FFN's two products for one direction on one token, among `directions` of a per-token
// tangent there: from kGluPerTokenDirections on, one product with each token's own matrix and
// that matrix's share (glu_jvp_per_token).
double glu_pair_flops(const Op& op, double directions) {
  const double p = double(op.in) * op.out;
  return directions >= kGluPerTokenDirections ? 2.0 * p + 3.0 * p / directions : 4.0 * p;
}

// The same, averaged over `n` directions that reach it `chunk` at a time (the last call takes
// the rest): a call of fewer than kGluPerTokenDirections takes the two products.
[[gnu::noinline]] BIASLAB_COLD double glu_chunked_flops(const Op& op, int n, int chunk) {
  const int calls = n / chunk, rest = n % chunk;
  const double f = double(calls) * chunk * glu_pair_flops(op, chunk) + (rest > 0 ? double(rest) * glu_pair_flops(op, rest) : 0.0);
  return f / std::max(1, n);
}

// The work of ops [p, cut) for one direction on one token, among `directions` there.
double per_token_flops(const Model& m, int p, int cut, double directions = 1) {
  double f = 0;
  for (int i = p; i < cut; ++i) {
    const Op& op = m.ops[static_cast<size_t>(i)];
    if (op.kind == OpKind::linear) f += 2.0 * op.in * op.out;
    else if (op.kind == OpKind::glu) f += glu_pair_flops(op, directions) + 10.0 * op.out;
    else f += 10.0 * op.in;
  }
  return f;
}

// A query row's column (one head's column of L) through the ops [at, to): a Linear first (the
// attention's o_proj) reads only that head's d columns of its weight.
double query_column_flops(const Model& m, const Op& attention, int at, int to, double directions) {
  const Op& next = m.ops[static_cast<size_t>(at)];
  if (to <= at || next.kind != OpKind::linear) return per_token_flops(m, at, to, directions);
  return 2.0 * (attention.in / attention.heads) * next.out + per_token_flops(m, at + 1, to, directions);
}

// The work of `rows` token rows' matrices of a shared tail at op p (tail_rows): each row's unit
// tangents at p, one per feature, through the per-token ops [p, cut).
double tail_rows_flops(const Model& m, double rows, int p, int cut) {
  return rows * m.ops[static_cast<size_t>(p)].in * per_token_flops(m, p, cut, m.ops[static_cast<size_t>(p)].in);
}

double trace_bytes(const Trace& t) {
  double b = 0;
  for (const Mat& x : t.inputs) b += double(x.size());
  b += double(t.output.size() + t.context.size());
  for (const AttentionCache& a : t.attention) {
    b += double(a.q.size() + a.k.size() + a.v.size());
    for (const Mat& p : a.probs) b += double(p.size());
  }
  return 8 * b;
}

}  // namespace

const Trace& TracePool::get(int k) {
  made_ = std::max(made_, k + 1);
  if (k < static_cast<int>(traces_.size())) return traces_[k];
  if (k == scratch_k_) return scratch_;
  // Kept in order while they fit: the inputs before k are made (and kept) first.
  while (static_cast<int>(traces_.size()) <= k && bytes_ < max_bytes_) {
    Trace t;
    const Mat x = draw_input(cfg_, static_cast<int>(traces_.size()));
    forward<double>(m_, w_, x, {}, &t);
    bytes_ += trace_bytes(t);
    traces_.push_back(std::move(t));
  }
  if (k < static_cast<int>(traces_.size())) return traces_[k];
  scratch_ = Trace();
  forward<double>(m_, w_, draw_input(cfg_, k), {}, &scratch_);
  scratch_k_ = k;
  return scratch_;
}

const char* stop_rule_name(StopRule r) {
  switch (r) {
    case StopRule::full_rank: return "full_rank";
    case StopRule::no_gain: return "no_gain";
    case StopRule::no_gain_kinked: return "no_gain_kinked";
    case StopRule::input_independent: return "input_independent";
    case StopRule::budget: return "budget";
    case StopRule::cancelled: return "cancelled";
  }
  return "";
}

// Whether this module has token rows (the page's first-load engine leaves them out): a constant,
// so that the code they use is compiled out where it is false.
#ifdef BIASLAB_LEAN_ENGINE
constexpr bool kTokenRows = false;
#else
constexpr bool kTokenRows = true;
#endif

bool token_rows_linked() { return kTokenRows; }

// Token rows (analysis/structure.hpp): the rank was taken from the last per_sample tokens of
// each sample; a null space found there was checked on every row, bounded through the
// per-token layers or computed (Structure::rows_check). sigma_bounds: kept_sigma_min is a
// lower bound (from those rows, or a Cholesky certificate) and null_sigma_max an upper one.
// (Here, not in report.cpp, so that the first-load engine leaves it out with them.)
void token_rows_json(const Structure& st, Json& structure) {
  if (!kTokenRows) return;
  if (st.sigma_bounds) structure["sigma_bounds"] = true;
  if (st.rows_per_sample > 0)
    structure["token_rows"] = {{"per_sample", st.rows_per_sample}, {"null_check", st.rows_check}};
}

BIASLAB_COLD RowPlan plan_rows(const Model& m, int param, int cut, double min_flops) {
  RowPlan plan;
#ifdef BIASLAB_LEAN_ENGINE
  return plan;  // (analyze() hands on what would use them)
#endif
  const int start = m.params[param].op;
  if (m.ops[start].kind == OpKind::position) return plan;  // its seed differs per token
  int at = start;
  for (int i = start; i < cut; ++i)
    if (!acts_per_token(m.ops[i])) at = i + 1;
  // Not inside a block whose skip could carry a tangent past `at` (one opened after the seed), nor
  // inside a parallel block (its branches' running sum): the tangent at `at` is then the only
  // one the rows and the check (tail_bounds) need.
  for (bool moved = true; moved && at < cut;) {
    moved = false;
    for (int b = 0; b < at; ++b) {
      const Op& op = m.ops[b];
      if (op.kind == OpKind::residual_begin && op.partner >= at && (op.parallel || b >= start)) {
        at = op.partner + 1;
        moved = true;
        break;
      }
    }
  }
  if (at >= cut) return plan;
  const int B = m.batch, T = m.tokens;
  const long n = static_cast<long>(m.params[param].value.size());
  const long w = cut < static_cast<int>(m.ops.size()) ? m.ops[cut].in : m.out_features;
  const long rows = std::max<long>(2, (3 * n + 2 * w - 1) / (2 * w));  // ceil(1.5 n / w) tokens
  const int k = static_cast<int>((rows + B - 1) / B);
  if (2 * k > T) return plan;
  if (!(double(n) * B * T * per_token_flops(m, at, cut) >= min_flops)) return plan;
  plan.at = at;
  plan.per_sample = k;
  return plan;
}

BIASLAB_COLD bool query_rows_apply(const Model& m, const Op& op, int param) {
  if (!query_bias_factorable(op, param)) return false;
  // A key bias takes its rows through L only beside its attention's query bias (the same rows'
  // matrices, made once where one engine runs both; alone, its d unit directions cost less), where
  // the query bias's rows start at the same op (query_rows_flops). (Its query bias has at least as
  // many directions: where the key bias's rows pay off, theirs do.)
  if (param == op.bk && op.bq < 0) return false;
  return (op.context > 0 ? op.context : m.tokens) < op.in / op.heads;
}

BIASLAB_COLD double query_row_columns(const Model& m, const Op& op, int t) {
  const int Tk = op.context > 0 ? op.context : m.tokens;
  const int keys = op.causal ? std::min(t + 1, Tk) : Tk;  // (the keys softmax_rows weighs)
  return double(op.heads) * std::max(0, op.sinks >= 0 ? keys : keys - 1);
}

BIASLAB_COLD double query_rows_flops(const Model& m, int param, const RowPlan& plan, int cut, int tail_p) {
#ifdef BIASLAB_LEAN_ENGINE
  return 0;  // (no token rows: plan_rows makes no plan)
#endif
  const Op& op = m.ops[static_cast<size_t>(m.params[param].op)];
  if (plan.at != m.params[param].op + 1 || !query_rows_apply(m, op, param)) return 0;
  if (param == op.bk && plan_rows(m, op.bq, cut, 0).at != plan.at) return 0;  // (the query bias's rows start elsewhere)
  const int d = op.in / op.heads, to = tail_p >= 0 ? tail_p : cut;
  auto width = [&](int i) { return double(i < static_cast<int>(m.ops.size()) ? m.ops[static_cast<size_t>(i)].in : m.out_features); };
  const double w = width(cut);
  double f = 0;
  for (int j = 0; j < plan.per_sample; ++j) {
    const double cols = query_row_columns(m, op, m.tokens - 1 - j);
    f += cols * (query_column_flops(m, op, plan.at, to, cols) + (tail_p >= 0 ? 2 * width(to) * w : 0));
    // (then, where there are fewer columns than outputs, their triangular factor, times K)
    f += cols < w ? 2 * w * cols * cols + 2 * cols * cols * d : 2 * cols * d * w;
  }
  return double(m.batch) * f;
}

BIASLAB_COLD double shared_query_rows_flops(const Model& m, int param, int cut, int* partner) {
  *partner = -1;
#ifdef BIASLAB_LEAN_ENGINE
  (void)m, (void)param, (void)cut;
  return 0;
#else
  const Op& op = m.ops[static_cast<size_t>(m.params[static_cast<size_t>(param)].op)];
  if (op.kind != OpKind::attention || op.bq < 0 || op.bk < 0 || (param != op.bq && param != op.bk)) return 0;
  const RowPlan pk = plan_rows(m, op.bk, cut, kRowSubsetMinFlops);
  if (query_rows_flops(m, op.bk, pk, cut) <= 0) return 0;  // (the key bias takes its unit directions)
  const RowPlan pq = plan_rows(m, op.bq, cut, kRowSubsetMinFlops);
  const double w = cut < static_cast<int>(m.ops.size()) ? m.ops[static_cast<size_t>(cut)].in : m.out_features;
  // Each row's matrix: its columns through the ops after the attention, and their triangular
  // factor (query_rows_flops less each bias's own product with its K), for the rows both take
  // (the last ones); 3 inputs, as structural_flops counts them.
  double f = 0;
  for (int j = 0; j < std::min(pq.per_sample, pk.per_sample); ++j) {
    const double cols = query_row_columns(m, op, m.tokens - 1 - j);
    f += cols * query_column_flops(m, op, pk.at, cut, cols) + (cols < w ? 2 * w * cols * cols : 0);
  }
  *partner = param == op.bq ? op.bk : op.bq;
  return 3.0 * m.batch * f;
#endif
}

BIASLAB_COLD double query_rows_estimate(const Model& m, int param, int cut) {
#ifdef BIASLAB_LEAN_ENGINE
  (void)m, (void)param, (void)cut;
  return 0;  // (no token rows)
#else
  const double f = query_rows_flops(m, param, plan_rows(m, param, cut, kRowSubsetMinFlops), cut);
  if (f <= 0) return 0;
  int partner = -1;
  const bool key = param == m.ops[static_cast<size_t>(m.params[static_cast<size_t>(param)].op)].bk;
  return 3.0 * f - (key ? shared_query_rows_flops(m, param, cut, &partner) : 0);
#endif
}

BIASLAB_COLD double expected_inputs(const Model& m, int param, int cut) {
#ifdef BIASLAB_LEAN_ENGINE
  (void)m, (void)param, (void)cut;
  return 3;  // (no split here)
#else
  const ModelParam& p = m.params[static_cast<size_t>(param)];
  const Op& op = m.ops[static_cast<size_t>(p.op)];
  const RowPlan rows = plan_rows(m, param, cut, kRowSubsetMinFlops);
  double reach;  // the rank one input's rows can reach
  if (query_rows_flops(m, param, rows, cut) > 0) {  // each head's columns of L, at a row
    reach = 0;
    const double w = cut < static_cast<int>(m.ops.size()) ? m.ops[static_cast<size_t>(cut)].in : m.out_features;
    for (int j = 0; j < rows.per_sample; ++j) reach += double(m.batch) * std::min(w, query_row_columns(m, op, m.tokens - 1 - j));
  } else {
    reach = stacked_rows(m, param, cut) * (cut < static_cast<int>(m.ops.size()) ? m.ops[static_cast<size_t>(cut)].in : m.out_features);
  }
  return std::clamp(std::ceil(double(p.value.size()) / std::max(1.0, reach)), 1.0, 3.0);
#endif
}

BIASLAB_COLD double stacked_rows(const Model& m, int param, int cut) {
  if (kTokenRows && cut < 0) cut = injective_cut(m, m.params[param].op);
  const RowPlan plan = kTokenRows ? plan_rows(m, param, cut, kRowSubsetMinFlops) : RowPlan{};
  return plan.at < 0 ? double(m.batch) * m.tokens : double(m.batch) * plan.per_sample;
}

BIASLAB_COLD double structural_flops_per_input(const Model& m, const ModelParam& p, bool unit_directions,
                                               double row_min_flops, int cut) {
  const double B = m.batch, T = m.tokens;
  if (cut < 0) cut = injective_cut(m, p.op);
  const RowPlan plan = kTokenRows ? plan_rows(m, static_cast<int>(&p - m.params.data()), cut, row_min_flops) : RowPlan{};
  // The directions per JVP call, as the solve chunks them (row_chunk) with the default tangent
  // batch, the one the CLI and the page solve with: a gated FFN's work per direction depends on
  // it. (The other directions, the reference and null vectors, run a few at a time and take the
  // two products: counted here as the unit directions' calls, lower by up to half of the FFN.)
  const int n = static_cast<int>(p.value.size()), all = static_cast<int>(B * T);
  const long elements = StructureOptions{}.chunk_elements;
  const int chunk = plan.at < 0 ? chunk_directions(m, p.op, cut, n, all, n, elements)
                                : std::min(chunk_directions(m, p.op, plan.at, n, all, n, elements),
                                           chunk_directions(m, plan.at, cut, n, static_cast<int>(B) * plan.per_sample, n, elements));
  double per_direction = 0;
  // A Linear's bias followed by activations: its unit directions stay one-hot into the next
  // Linear, which then scales one weight column per token (model/jvp.cpp). Other directions
  // (the reference, null vectors) take the dense path.
  bool one_hot = unit_directions && m.ops[p.op].kind == OpKind::linear, activated = false;
  // While every token's tangent is the same (a bias's direction, through Linears and BatchNorm
  // in eval mode), the JVP carries one row per direction: such an op costs one token's work.
  bool bc = m.ops[p.op].kind != OpKind::position;  // a position table enters per token
  for (int i = p.op; i < cut; ++i) {
    const Op& op = m.ops[i];
    const double F = op.in;
    // From the plan's op on, the per-token ops see its rows only.
    const double N = plan.at >= 0 && i >= plan.at ? B * plan.per_sample : B * T;
    const double Nb = bc ? 1.0 : N;
    if (i > p.op && one_hot && activated && op.kind == OpKind::linear) {
      per_direction += 2 * N * op.out;
      one_hot = false;
      continue;
    }
    if (i > p.op) {
      activated = activated || op.kind == OpKind::activation;
      if (op.kind != OpKind::activation) one_hot = false;
    }
    if (op.kind == OpKind::attention) {
      const double core = 4 * B * T * (op.context ? op.context : T) * F;
      // A q/k/v bias enters after the projections and touches one head per direction.
      per_direction += i == p.op ? core / op.heads : 2 * Nb * F * F * (1 + 2.0 * op.kv_heads / op.heads) + core;
      bc = false;
    } else if (op.kind == OpKind::glu) {
      // A gate or up bias enters after its projection; anything earlier passes both.
      per_direction += (i == p.op ? 0 : bc ? 4.0 * op.in * op.out : N * glu_chunked_flops(op, n, chunk)) + 10 * N * op.out;
      bc = false;
    } else if (i > p.op) {
      switch (op.kind) {
        case OpKind::linear:
          per_direction += 2 * Nb * op.in * op.out;
          break;
        case OpKind::conv:
          per_direction += 2 * N * op.in / op.groups * op.out * op.kernel_h * op.kernel_w;
          bc = false;
          break;
        case OpKind::residual_begin:
        case OpKind::residual_end:
        case OpKind::branch_next:
        case OpKind::position:
          per_direction += 10 * Nb * F;
          break;
        case OpKind::norm:  // only BatchNorm in eval mode keeps the form
          bc = bc && op.norm == NormKind::batch_eval;
          per_direction += 10 * (bc ? 1.0 : N) * F;
          break;
        default:
          per_direction += 10 * N * F;
          bc = false;
      }
    }
  }
  return double(p.value.size()) * per_direction;
}

[[gnu::noinline]] BIASLAB_COLD int chunk_directions(const Model& m, int start, int stop, int n, int N, int count, long elements) {
  long widest = std::max(n, stop < static_cast<int>(m.ops.size()) ? m.ops[stop].in : m.out_features);
  for (int i = start; i < stop; ++i) widest = std::max<long>(widest, m.ops[i].out);
  const long per_dir = std::max<long>(1, long(N) * widest);
  return static_cast<int>(std::max<long>(1, std::min<long>(std::max(count, 1), elements / per_dir)));
}

namespace {

// Directions per JVP call with token rows `sub` (nullptr: every row): the chunk fits both the
// ops before the rows' op, at every row, and the ops after it, at its rows.
int row_chunk(const Model& m, int start, int stop, int n, int N, int count, long elements, const TokenRows* sub) {
  if (!kTokenRows || !sub) return chunk_directions(m, start, stop, n, N, count, elements);
  return std::min(chunk_directions(m, start, sub->at, n, N, count, elements),
                  chunk_directions(m, sub->at, stop, n, static_cast<int>(sub->rows.size()), count, elements));
}

using ColMat = Eigen::MatrixXd;

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

struct SparseCol {
  std::vector<int> rows;
  std::vector<double> vals;
};

// Appends the entries of v[0, len) that are not exactly zero, as rows first + r, times `scale`.
void push_nonzeros(SparseCol& sc, const double* v, Eigen::Index len, Eigen::Index first, double scale = 1.0) {
  for (Eigen::Index r = 0; r < len; ++r)
    if (v[r] != 0.0) {
      sc.rows.push_back(static_cast<int>(first + r));
      sc.vals.push_back(v[r] * scale);
    }
}

struct Cluster {
  std::vector<int> cols;  // bias coordinates, ascending
  ColMat R;               // rows whose Gram matrix is the stacked J^T J on these columns
                          // (triangular after a rank decision, unless certified full from Gram)
  Vec sv;                 // singular values of the stacked Jacobian on these columns
  bool full = false;      // certified of full column rank from the Gram matrix (R not formed)
  bool sv_bound = false;  // sv holds one lower bound for every singular value (a Cholesky certificate)
  // A wide cluster split by its Gram matrix (gram_split): the null basis and a factor of R along
  // it, valid for the rank decision that made them (null_space takes them as they are).
  ColMat split_v;
  ColMat split_f;
  // R's right singular vectors, where the rank decision took its singular values from an SVD of
  // a cluster of at most kSvdKeepV columns (null_space then takes them instead of a second SVD).
  ColMat svd_v;
  // For confirming inputs: an orthonormal basis V of the null space at the last rank decision,
  // a factor F with F^T F = V^T R^T R V (diagonal: R's singular values along V, from an SVD), and
  // the rows that confirming inputs added along it (J V, compressed), which the next full
  // factorisation takes in as S V^T.
  ColMat vnull;
  ColMat snull0;
  ColMat snull;
};

// The numerical null space of a factored cluster: the right singular vectors whose singular
// values are <= tau (c - kept columns), and the diagonal of those values (0 where R has fewer rows
// than columns) as R's factor along them. Returns whether it factored R (an SVD), for the
// caller's flop count.
double null_space(const Cluster& cl, double tau, ColMat& v, ColMat& f) {
  const Eigen::Index c = static_cast<Eigen::Index>(cl.cols.size());
  Eigen::Index kept = 0;
  for (Eigen::Index i = 0; i < cl.sv.size(); ++i) kept += cl.sv(i) > tau;
  const Eigen::Index d = c - kept;
  Vec s = Vec::Zero(d);
  if (d == 0) {
    v = ColMat(c, 0);
    f = ColMat(0, 0);
    return false;
  }
#ifndef BIASLAB_LEAN_ENGINE
  if (cl.split_v.cols() == d) {  // gram_split made them for this rank
    if (cl.split_f.rows() != d || cl.split_f.cols() != d) throw std::logic_error("gram_split's factor is not square in the null dimension");
    v = cl.split_v;
    f = cl.split_f;
    return 0;
  }
#endif
  if (kept == 0 || cl.R.rows() == 0) {
    v = ColMat::Identity(c, c).rightCols(d);
    for (Eigen::Index i = 0; i < d && i < cl.sv.size(); ++i) s(i) = cl.sv(i);
    f = s.asDiagonal();
    return 0;
  }
#ifndef BIASLAB_LEAN_ENGINE
  // Rank m, the rows' count, from their Gram matrix (row_rank_floor): the null space is the
  // complement of R's m rows, the last c - m columns of Q in a QR of R^T, where R's singular
  // values are 0, as the SVD's would be.
  if (cl.sv_bound && cl.R.rows() < c && kept == cl.R.rows()) {
    const Eigen::HouseholderQR<ColMat> qr(cl.R.transpose());
    v = qr.householderQ() * ColMat(ColMat::Identity(c, c).rightCols(d));
    f = ColMat::Zero(d, d);
    return 4.0 * double(c) * double(c) * double(kept);
  }
#endif
  // The rank decision's SVD of this R where it kept V, else a new one.
  const bool factor = cl.svd_v.cols() != c;
  Eigen::BDCSVD<ColMat> svd;
  if (factor) svd.compute(cl.R, Eigen::ComputeFullV);
  const ColMat& V = factor ? svd.matrixV() : cl.svd_v;
  const Vec& all = factor ? svd.singularValues() : cl.sv;
  v = V.rightCols(d);
  for (Eigen::Index i = 0; i < d; ++i)
    if (kept + i < all.size()) s(i) = all(kept + i);
  f = s.asDiagonal();
  return factor ? 12.0 * std::pow(double(c), 3) : 0;
}

// Singular values of R, largest first; with `v`, its right singular vectors too (an SVD costs
// little more with them than without).
Vec singular_values(const ColMat& R, ColMat* v = nullptr) {
  if (R.rows() == 0 || R.cols() == 0) return Vec();
  if (R.cols() == 1) {
    if (v) *v = ColMat::Ones(1, 1);
    return Vec::Constant(1, R.col(0).norm());
  }
  const unsigned want = v ? Eigen::ComputeFullV : 0;
  if (R.rows() > 2 * R.cols()) {  // tall: the same singular values (and vectors) from its triangular factor
    Eigen::HouseholderQR<ColMat> qr(R);
    const ColMat T = qr.matrixQR().topRows(R.cols()).triangularView<Eigen::Upper>();
    Eigen::BDCSVD<ColMat> svd(T, want);
    if (v) *v = svd.matrixV();
    return svd.singularValues();
  }
  Eigen::BDCSVD<ColMat> svd(R, want);
  if (v) *v = svd.matrixV();
  return svd.singularValues();
}

// Clusters up to this many columns keep the rank decision's right singular vectors (c^2 numbers).
constexpr Eigen::Index kSvdKeepV = 512;

// From this many columns on, full rank is certified by a Cholesky factorisation instead of the
// Gram matrix's eigenvalues (gram_singular_values).
constexpr Eigen::Index kCholeskyColumns = 512;

#ifndef BIASLAB_LEAN_ENGINE
// Wide Gram matrices and their Cholesky factors in column blocks of this width, the blocks side
// by side natively (OpenMP): Eigen runs a general product on every core but a triangular one
// (a rank update, the update inside its LLT) on one. Each block is the same arithmetic whatever
// the number of threads, so the results do not depend on it.
constexpr Eigen::Index kGramBlock = 256;

// The lower triangle of A (c x c) += alpha U U^T, U (c x k); the strict upper triangle is not
// touched.
void lower_rank_update(Eigen::Ref<ColMat> A, const Eigen::Ref<const ColMat>& U, double alpha) {
  const Eigen::Index c = A.cols(), blocks = (c + kGramBlock - 1) / kGramBlock;
#pragma omp parallel for schedule(dynamic)
  for (Eigen::Index j = 0; j < blocks; ++j) {
    const Eigen::Index j0 = j * kGramBlock, b = std::min(kGramBlock, c - j0), below = c - j0 - b;
    A.block(j0, j0, b, b).selfadjointView<Eigen::Lower>().rankUpdate(U.middleRows(j0, b), alpha);
    if (below > 0) A.block(j0 + b, j0, below, b).noalias() += alpha * U.bottomRows(below) * U.middleRows(j0, b).transpose();
  }
}

// LLT of A's lower triangle in place (A = L L^T, L in the lower triangle; the strict upper
// triangle is not touched), right-looking in blocks: whether it completes is what the
// certificate below reads (a NaN pivot completes; the caller checks the diagonal).
bool blocked_llt(Eigen::Ref<ColMat> A) {
  const Eigen::Index c = A.cols();
  for (Eigen::Index k0 = 0; k0 < c; k0 += kGramBlock) {
    const Eigen::Index b = std::min(kGramBlock, c - k0), rest = c - k0 - b;
    Eigen::Ref<ColMat> A11 = A.block(k0, k0, b, b);
    if (Eigen::LLT<Eigen::Ref<ColMat>, Eigen::Lower>(A11).info() != Eigen::Success) return false;
    if (rest == 0) break;
    // A21 := A21 L11^-T, in row blocks side by side; then A22 -= A21 A21^T.
    const Eigen::Index row_blocks = (rest + kGramBlock - 1) / kGramBlock;
#pragma omp parallel for schedule(static)
    for (Eigen::Index i = 0; i < row_blocks; ++i) {
      const Eigen::Index i0 = k0 + b + i * kGramBlock, r = std::min(kGramBlock, c - i0);
      A11.triangularView<Eigen::Lower>().transpose().solveInPlace<Eigen::OnTheRight>(A.block(i0, k0, r, b));
    }
    lower_rank_update(A.bottomRightCorner(rest, rest), A.block(k0 + b, k0, rest, b), -1.0);
  }
  return true;
}

// The Cholesky certificate of full rank. G (c x c, its lower triangle read) is a computed Gram
// matrix within `err` (2-norm) of the exact one, and `trace` is at least its trace. A Cholesky
// factorisation that runs to completion in floating point on G - s I has R^T R = G - s I + E
// with |E|_2 <= gamma_{c+1} trace(G - s I) (each entry's error is at most gamma_{c+1}
// (|R|^T |R|)_ij, and | |R| |_F^2 = trace(R^T R)), so lambda_min(G) >= s - lift with lift =
// 2 (c + 1) u trace. With lambda_min(G) > mu, every singular value of the matrix whose Gram
// matrix G stands for is at least sqrt(mu - err), and full rank needs that to be 2 tau. Returns
// that bound, or nothing. A first try at a larger mu (1e-4 of the mean sigma^2) makes the bound
// informative when it holds.
// G is factorised in place (a copy of a wide G would be its size again): its strict upper
// triangle keeps the lower one and its diagonal is saved, so a failed try leaves G's lower
// triangle as it was; after a success it holds the factor.
std::optional<double> cholesky_floor(ColMat& G, double trace, double err, double tau) {
  const Eigen::Index c = G.cols();
  const double lift = 2.0 * double(c + 1) * 0x1.0p-53 * trace;
  const double need = 4.0 * tau * tau + err;
  const double first = std::max(need, 1e-4 * trace / double(c));
  if (!std::isfinite(trace) || !std::isfinite(err)) return std::nullopt;
  const Vec diag = G.diagonal();
  for (Eigen::Index j = 1; j < c; ++j) G.col(j).head(j) = G.row(j).head(j).transpose();
  for (const double mu : {first, need}) {
    G.diagonal() = diag.array() - (mu + lift);
    // (a NaN pivot passes LLT's test: the factor must be finite too)
    if (blocked_llt(G) && G.diagonal().allFinite())
      return std::sqrt(mu - err);
    for (Eigen::Index j = 0; j + 1 < c; ++j) G.col(j).tail(c - 1 - j) = G.row(j).tail(c - 1 - j).transpose();
    if (mu == need) break;
  }
  G.diagonal() = diag;
  return std::nullopt;
}
#endif

// Singular values of M (m x c) from its Gram matrix when that certifies full column rank with
// every singular value far above `tau`; empty otherwise (the caller then factors M).
// Forming G = M^T M in floating point errs by at most about m u |M|_F^2 (u = 2^-53) and a
// symmetric eigensolver adds about c u |G|; with err twice their sum, each eigenvalue of G is
// within err of sigma^2. Accepted only when the smallest is above 1e6 err (sigma then has about
// 6 correct digits) and sigma_min - its uncertainty stays above 2 tau. Cheaper than a QR when
// the answer is "full rank", which is the common case for effective biases.
// *gram (when given and c >= kCholeskyColumns): G itself, its lower triangle, for gram_split.
Vec gram_singular_values(const ColMat& M, double tau, bool* bound, ColMat* gram = nullptr) {
  *bound = false;
  const Eigen::Index m = M.rows(), c = M.cols();
  if (c == 0 || (m < c && !(kTokenRows && c >= kCholeskyColumns && gram))) return Vec();
  ColMat G = ColMat::Zero(c, c);
  G.selfadjointView<Eigen::Lower>().rankUpdate(M.transpose());
  const double fro2 = M.squaredNorm();
  const double err = 2.0 * double(m + c + 8) * 0x1.0p-53 * fro2;
#ifndef BIASLAB_LEAN_ENGINE
  if (m < c) {  // rank m at most: the Gram matrix for gram_split
    *gram = std::move(G);
    return Vec();
  }
  if (c >= kCholeskyColumns) {
    // Wide: a Cholesky factorisation settles it at a fraction of the eigenvalues' cost
    // (cholesky_floor, with trace(G) = |M|_F^2). The bound is rigorous, so unlike the eigenvalue
    // rule below it needs no digits of accuracy (no 1e6 err). It stands for every singular value
    // (kept_sigma_min is then a lower bound).
    if (const std::optional<double> floor = cholesky_floor(G, fro2, err, tau)) {
      *bound = true;
      return Vec::Constant(c, *floor);
    }
    if (gram) *gram = std::move(G);
    return Vec();
  }
#endif
  Eigen::SelfAdjointEigenSolver<ColMat> es(G, Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) return Vec();
  const Vec& lam = es.eigenvalues();  // ascending
  const double lmin = lam(0);
  if (!(lmin > 1e6 * err) || !(std::sqrt(lmin - err) > 2.0 * tau)) return Vec();
  Vec sv(c);
  for (Eigen::Index i = 0; i < c; ++i) sv(i) = std::sqrt(lam(c - 1 - i));  // descending, as an SVD
  return sv;
}

#ifndef BIASLAB_LEAN_ENGINE
// A lower bound on every singular value of M (m x c, fewer rows than columns) from its rows' Gram
// matrix M M^T (m x m), where the Cholesky certificate (cholesky_floor; the same formation error
// as gram_singular_values's, m and c swapped) puts them all above 2 tau: M then has rank m
// exactly, its other c - m singular values 0. Nothing where it does not. The rows' Gram matrix
// costs m^2 c where the columns' costs c^2 m and gram_split's null space more (a query bias's
// first input: 960 rows against 2048 columns); the null space, where a later step asks for it,
// is then a QR's (null_space). (structure.hpp declares it, for the tests.)
}  // namespace

std::optional<double> row_rank_floor(const Eigen::MatrixXd& M, double tau) {
  const Eigen::Index m = M.rows(), c = M.cols();
  ColMat G = ColMat::Zero(m, m);
  lower_rank_update(G, M, 1.0);
  const double fro2 = M.squaredNorm();
  const double err = 2.0 * double(m + c + 8) * 0x1.0p-53 * fro2;
  return cholesky_floor(G, fro2, err, tau);
}

namespace {

// Its work, charged whether it certifies or not: the rows' Gram matrix and two tries of the
// Cholesky factorisation at most.
double row_rank_flops(Eigen::Index m, Eigen::Index c) { return double(m) * double(m) * double(c) + 2.0 * std::pow(double(m), 3) / 3.0; }

// The rank and null space of a wide cluster M (m x c, any m) that is not of full rank, from its
// Gram matrix G (lower triangle, as gram_singular_values formed it), at a fraction of a QR and an
// SVD's cost, or nothing (the caller then factors M). Both halves are certified:
// - A Cholesky factorisation with diagonal pivoting (as LAPACK's dpstrf: each step takes the
//   column with the largest diagonal of what is left, so the rank shows) runs until no diagonal
//   left exceeds 4 tau^2 + err: P G P^T = [L11; L21] [L11; L21]^T + S, with r columns taken.
//   The first r pivoted columns M1 are of full rank with sigma_min(M1) >= sqrt(mu - err) > 2 tau
//   by the Cholesky certificate of gram_singular_values on their block of G. Removing columns
//   cannot raise a singular value (interlacing), so sigma_r(M) >= sigma_min(M1): at least r
//   singular values are kept.
// - The other c - r columns give the candidate null space X = P^T [-L11^-T L21^T; I] (exact where
//   S is 0), made orthonormal (V). By min-max, the c - r smallest singular values of M are at
//   most sigma_max(M V) plus the rounding of that product, which must stay <= tau.
// So exactly r singular values exceed tau, and V spans the rest to within tau.
struct Split {
  int rank = 0;
  double kept = 0;  // a lower bound on the r kept singular values
  ColMat v;         // c x (c - r), orthonormal
  ColMat f;         // M v's triangular factor (f^T f = v^T M^T M v)
  double top = 0;   // an upper bound on sigma_max(M v), within tau
};

// Over `budget` flops in all (*flops included) once the rank is known: nothing.
std::optional<Split> gram_split(const ColMat& M, ColMat G, double tau, double* flops, double budget) {
  const Eigen::Index m = M.rows(), c = M.cols();
  if (G.rows() != c) return std::nullopt;
  const double fro2 = M.squaredNorm();
  const double err = 2.0 * double(m + c + 8) * 0x1.0p-53 * fro2;
  const double lift = 2.0 * double(c + 1) * 0x1.0p-53 * fro2;
  const double need = 4.0 * tau * tau + err;
  G.triangularView<Eigen::StrictlyUpper>() = G.transpose();
  ColMat A = G;  // becomes [L11; L21] in its first r columns (below the diagonal), pivoted
  Vec d = A.diagonal();
  std::vector<Eigen::Index> perm(static_cast<size_t>(c));
  std::iota(perm.begin(), perm.end(), Eigen::Index(0));
  Eigen::Index r = 0;
  for (; r < c; ++r) {
    Eigen::Index p;
    if (!(d.tail(c - r).maxCoeff(&p) > need)) break;
    p += r;
    if (p != r) {
      A.row(r).swap(A.row(p));
      A.col(r).swap(A.col(p));
      std::swap(d(r), d(p));
      std::swap(perm[static_cast<size_t>(r)], perm[static_cast<size_t>(p)]);
    }
    const double l = std::sqrt(d(r));
    A(r, r) = l;
    const Eigen::Index rest = c - r - 1;
    if (rest > 0) {
      A.col(r).tail(rest).noalias() -= A.block(r + 1, 0, rest, r) * A.row(r).head(r).transpose();
      A.col(r).tail(rest) /= l;
      d.tail(rest) -= A.col(r).tail(rest).cwiseAbs2();
    }
  }
  *flops += double(r) * double(r) * (double(c) - 2.0 * double(r) / 3.0);
  if (r == c) return std::nullopt;
  // (M V and V's QR only where r > 0; the singular values of M V only where its norm is not enough)
  const double d_null = double(c - r),
               rest = (r > 0 ? 2.0 * double(m) * double(c) * d_null + 6.0 * double(c) * d_null * d_null : 0.0) +
                      2.0 * std::pow(double(r), 3) / 3.0 + 2.0 * double(m) * d_null * d_null,
               values = 4.0 * std::pow(d_null, 3);
  if (*flops + rest + values > budget) return std::nullopt;
  Split out;
  out.rank = static_cast<int>(r);
  if (r > 0) {
    ColMat A1(r, r);
    for (Eigen::Index j = 0; j < r; ++j)
      for (Eigen::Index i = 0; i < r; ++i) A1(i, j) = G(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    // A first try well under the last pivot (lambda_min(A1) is at most that pivot) makes the
    // bound informative when it holds.
    const double first = std::max(need, 1e-4 * A(r - 1, r - 1) * A(r - 1, r - 1));
    for (const double mu : {first, need}) {
      ColMat S = A1;
      S.diagonal().array() -= mu + lift;
      *flops += double(r) * double(r) * double(r) / 3.0;
      if (Eigen::LLT<ColMat, Eigen::Lower>(S).info() == Eigen::Success) {
        out.kept = std::sqrt(mu - err);
        break;
      }
      if (mu == need) return std::nullopt;
    }
  }
  const Eigen::Index dn = c - r;
  ColMat Y;
  if (r == 0) {  // nothing kept: V is the identity, M V is M
    out.v = ColMat::Identity(c, c);
    Y = M;
  } else {
    ColMat X = ColMat::Zero(c, dn);
    X.topRows(r) = A.topLeftCorner(r, r).triangularView<Eigen::Lower>().transpose().solve(-A.block(r, 0, dn, r).transpose());
    X.bottomRows(dn).setIdentity();
    ColMat V0(c, dn);
    for (Eigen::Index k = 0; k < c; ++k) V0.row(perm[static_cast<size_t>(k)]) = X.row(k);
    Eigen::HouseholderQR<ColMat> qr(V0);
    out.v = qr.householderQ() * ColMat::Identity(c, dn);
    Y = M * out.v;
  }
  // M along V as a triangular factor (try_confirm stacks its inputs' rows under it, the report
  // takes its singular values): no rotation of V to singular vectors is needed.
  // (dn x dn, as null_space's: fewer rows of M than null directions are padded with zero rows)
  if (Y.rows() > dn) {
    out.f = Eigen::HouseholderQR<ColMat>(Y).matrixQR().topRows(dn).triangularView<Eigen::Upper>();
  } else {
    out.f = ColMat::Zero(dn, dn);
    out.f.topRows(Y.rows()) = Y;
  }
  *flops += rest;
  // |fl(M V) - M V|_2 <= |fl(M V) - M V|_F <= gamma_c |M|_F |V|_F, with |V|_F = sqrt(c - r).
  const double rounding = double(c + 2) * 0x1.0p-53 * std::sqrt(fro2 * d_null);
  // sigma_max(M V) <= |M V|_F; where that is not within tau, the factor's largest singular
  // value, which the QR's rounding (backward stable: within gamma_(m+dn) |Y|_F) can move.
  const double fro_y = Y.norm();
  out.top = fro_y;
  if (!(out.top + rounding <= tau)) {
    *flops += values;
    out.top = Eigen::BDCSVD<ColMat>(out.f).singularValues()(0) + 2.0 * double(m + dn) * 0x1.0p-53 * fro_y;
  }
  if (!(out.top + rounding <= tau)) return std::nullopt;
  out.top += rounding;
  return out;
}

// The Gram matrix of a bias before an activation and a Linear, from the layers' factors.
// The bias of a Linear (c outputs) feeds an elementwise activation, then a Linear W2 (F x c),
// then only residual ends whose skip carries no tangent of the bias and at most one LayerNorm or
// RMSNorm (gain Gamma) before the cut. Token t's Jacobian is then
//   J_t = r_t Gamma (I - U_t U_t^T) W2 D_t,
// with D_t the activation's derivatives (a gated FFN's: below), r_t the norm's 1 / std and U_t its removed directions
// (1 / sqrt(F) and the normalised token / sqrt(F) for a LayerNorm, the latter for RMSNorm; no
// norm: r_t = 1, Gamma = I, no U). Its Gram matrix over every token is
//   G = sum_t J_t^T J_t = A o S - (H + H^T),   A = W2^T Gamma^2 W2,   S = sum_t r_t^2 d_t d_t^T,
// H = sum_t X_t P_t^T with P_t = r_t D_t W2^T U_t, X_t = r_t D_t W2^T Gamma^2 U_t - P_t K_t / 2,
// K_t = U_t^T Gamma^2 U_t: one product of the width F for A, the tokens' few columns for the
// rest, where the stacked Jacobian needs rows x c^2 (the issue's Hadamard form, with the norm's
// rank-2 terms). It stands for the Jacobian of the trace's values, as the tangents do.
// A gated FFN's gate or up bias is the same form: D_t holds act'(g_t) u_t or act(g_t) (g_t, u_t
// its token's gate and up projections), and W2 is its down_proj.
struct MlpGramPlan {
  int act = -1, lin = -1, norm = -1;  // ops (act: the activation, or the glu)
  int removed = 0;                    // columns of U_t
  bool gate = false;                  // a glu's gate bias (else its up bias, where act is a glu)
};

std::optional<MlpGramPlan> mlp_gram_plan(const Model& m, int param, int cut) {
  const ModelParam& p = m.params[static_cast<size_t>(param)];
  const int a = p.op;
  if (p.role != ParamRole::bias || a + 1 >= cut) return std::nullopt;
  const Op& first = m.ops[static_cast<size_t>(a)];
  MlpGramPlan plan{a + 1, a + 2, -1, 0, false};
  if (first.kind == OpKind::glu && (first.bg == param || first.bu == param)) {
    plan = {a, a + 1, -1, 0, first.bg == param};
  } else if (first.kind != OpKind::linear || first.b != param || a + 2 >= cut ||
             m.ops[static_cast<size_t>(a + 1)].kind != OpKind::activation) {
    return std::nullopt;
  }
  if (m.ops[static_cast<size_t>(plan.lin)].kind != OpKind::linear) return std::nullopt;
  for (int i = plan.lin + 1; i < cut; ++i) {
    const Op& op = m.ops[static_cast<size_t>(i)];
    if (op.kind == OpKind::residual_end && !op.parallel && op.partner < a) continue;
    if (op.kind == OpKind::norm && plan.norm < 0 && (op.norm == NormKind::layer || op.norm == NormKind::rms)) {
      plan.norm = i;
      plan.removed = op.norm == NormKind::layer ? 2 : 1;
      continue;
    }
    return std::nullopt;
  }
  return plan;
}

// The work of A = W2^T Gamma^2 W2 (its lower triangle) for c columns: a gated FFN's gate and up
// biases share it (shared_gram_flops).
double gram_a_flops(const Model& m, const MlpGramPlan& plan, int c) {
  return double(m.ops[static_cast<size_t>(plan.lin)].out) * double(c) * c;
}

// Its work, c columns over N tokens.
double mlp_gram_flops(const Model& m, const MlpGramPlan& plan, int c, int N) {
  const double F = m.ops[static_cast<size_t>(plan.lin)].out, k = plan.removed, cc = double(c) * c;
  const Op& ao = m.ops[static_cast<size_t>(plan.act)];
  const double gates = ao.kind == OpKind::glu ? 4.0 * N * ao.in * c : 0;  // g_t and u_t
  return gram_a_flops(m, plan, c) + double(N) * cc + 2.0 * k * N * cc + 8.0 * F * c * k * N + gates;
}

struct StructuredGram {
  ColMat G;  // lower triangle
  double trace = 0, err = 0;
};

// G on input `tr`, with `err` a bound on |fl(G) - G|_2. Every entry of every product errs by at
// most gamma_K times the same product of absolute values (K over-counts the longest chain: the
// sums over F, the tokens and U's columns, and the few products in between). Those products are
// bounded without forming them: |W2|^T Gamma^2 |W2| o sum_t r_t^2 |d_t| |d_t|^T is a Hadamard
// product of two positive semidefinite matrices, whose 2-norm is at most max_i S_ii times
// |Gamma W2|_F^2 (Schur); the corrections' by |X~|_F |Z~|_F, the same factors in absolute values.
// `shared`: A (lower triangle, zero above) where the solver kept it from the same plan's other
// bias, taken; `keep`: where to keep this call's A (nullptr: nowhere).
StructuredGram mlp_gram(const Model& m, const Trace& tr, const MlpGramPlan& plan, ColMat* shared, ColMat* keep) {
  const Op& lin = m.ops[static_cast<size_t>(plan.lin)];
  const Mat& W2 = m.params[static_cast<size_t>(lin.w)].value;  // (F, c)
  const Eigen::Index F = W2.rows(), c = W2.cols();
  const Op& ao = m.ops[static_cast<size_t>(plan.act)];
  const Mat& h = tr.inputs[static_cast<size_t>(plan.act)];
  const Eigen::Index N = h.rows();
  Mat D;  // (N, c)
  if (ao.kind == OpKind::glu) {
    auto project = [&](int w, int b) {
      Mat z = h * m.params[static_cast<size_t>(w)].value.transpose();
      if (b >= 0) z.rowwise() += m.params[static_cast<size_t>(b)].value.col(0).transpose();
      return z;
    };
    const Mat g = project(ao.wg, ao.bg);
    D = plan.gate ? Mat(ao.act->derivative(g).cwiseProduct(project(ao.wu, ao.bu))) : ao.act->f64(g);
  } else {
    D = ao.act->derivative(h);
  }
  const int k = plan.removed;
  Vec r = Vec::Ones(N), gam = Vec::Ones(F);
  ColMat U(F, Eigen::Index(k) * N);
  if (plan.norm >= 0) {
    const Op& no = m.ops[static_cast<size_t>(plan.norm)];
    const Mat& x = tr.inputs[static_cast<size_t>(plan.norm)];
    Mat Ut;
    for (Eigen::Index t = 0; t < N; ++t) {
      r(t) = token_norm_factors(no, x.row(t), &Ut);
      U.middleCols(Eigen::Index(k) * t, k) = Ut;
    }
    if (no.gain >= 0) gam = m.params[static_cast<size_t>(no.gain)].value.col(0);
  }
  const Vec g2 = gam.cwiseAbs2();
  const double v2 = W2.rowwise().squaredNorm().dot(g2);  // |Gamma W2|_F^2
  StructuredGram out;
  if (shared) {
    out.G = std::move(*shared);  // (taken, not copied: the second of its two biases)
  } else {
    out.G = ColMat::Zero(c, c);
    if (plan.norm >= 0 && m.ops[static_cast<size_t>(plan.norm)].gain >= 0)  // A
      lower_rank_update(out.G, ColMat(W2.transpose() * gam.asDiagonal()), 1.0);
    else
      lower_rank_update(out.G, W2.transpose(), 1.0);  // (Gamma = I: no copy of W2)
    if (keep) *keep = out.G;
  }
  ColMat E(c, N);
  for (Eigen::Index t = 0; t < N; ++t) E.col(t) = r(t) * D.row(t).transpose();
  // S = sum_t E_t E_t^T in G's upper triangle (a second c x c matrix would double the memory
  // where c is a gated FFN's 5632), the two diagonals apart.
  const Vec a_diag = out.G.diagonal();
  out.G.diagonal().setZero();
  out.G.selfadjointView<Eigen::Upper>().rankUpdate(E);
  const Vec s_diag = out.G.diagonal();
  for (Eigen::Index j = 0; j + 1 < c; ++j)
    out.G.col(j).tail(c - 1 - j).array() *= out.G.row(j).tail(c - 1 - j).transpose().array();
  out.G.diagonal() = a_diag.cwiseProduct(s_diag);
  double bound = s_diag.maxCoeff() * v2;
  if (k > 0) {
    const ColMat GU = g2.asDiagonal() * U;
    const ColMat B = W2.transpose() * U, C = W2.transpose() * GU;
    const ColMat Wa = W2.cwiseAbs(), Ua = U.cwiseAbs(), GUa = g2.asDiagonal() * Ua;
    const ColMat Ba = Wa.transpose() * Ua, Ca = Wa.transpose() * GUa;
    ColMat X(c, Eigen::Index(k) * N), Z(c, Eigen::Index(k) * N), Xa(c, Eigen::Index(k) * N), Za(c, Eigen::Index(k) * N);
    for (Eigen::Index t = 0; t < N; ++t) {
      const Eigen::Index j = Eigen::Index(k) * t;
      const ColMat K = U.middleCols(j, k).transpose() * GU.middleCols(j, k);
      const ColMat Ka = Ua.middleCols(j, k).transpose() * GUa.middleCols(j, k);
      const Vec dt = E.col(t);
      const Vec da = dt.cwiseAbs();
      Z.middleCols(j, k) = dt.asDiagonal() * B.middleCols(j, k);
      X.middleCols(j, k) = dt.asDiagonal() * C.middleCols(j, k) - 0.5 * Z.middleCols(j, k) * K;
      Za.middleCols(j, k) = da.asDiagonal() * Ba.middleCols(j, k);
      Xa.middleCols(j, k) = da.asDiagonal() * Ca.middleCols(j, k) + 0.5 * Za.middleCols(j, k) * Ka;
    }
    const ColMat H = X * Z.transpose();
    out.G.triangularView<Eigen::Lower>() -= H + H.transpose();
    bound += 2.0 * Xa.norm() * Za.norm();
  }
  const double K = 3.0 * double(F) + 2.0 * double(k) * double(N) + double(N) + 16.0;
  const double gamma = K * 0x1.0p-53 / (1.0 - K * 0x1.0p-53);
  out.err = 2.0 * gamma * bound;  // twice: the bounds' own rounding
  out.trace = out.G.diagonal().sum() + double(c) * out.err;
  return out;
}

// The plan where the structure takes this path: a bias of 512 directions or more, whose tokens'
// rows at the cut outnumber them (else it cannot be of full rank), and whose Gram matrix from the
// factors costs less than the stacked rows'.
std::optional<MlpGramPlan> structured_plan(const Model& m, int param, int cut) {
  const long n = static_cast<long>(m.params[static_cast<size_t>(param)].value.size());
  if (!kTokenRows || n < kCholeskyColumns) return std::nullopt;
  std::optional<MlpGramPlan> mlp = mlp_gram_plan(m, param, cut);
  if (!mlp) return mlp;
  const int N = m.batch * m.tokens;
  const int F = m.ops[static_cast<size_t>(mlp->lin)].out;  // the width at the cut
  if (double(N) * (F - mlp->removed) < n ||
      mlp_gram_flops(m, *mlp, static_cast<int>(n), N) > 0.75 * stacked_rows(m, param, cut) * F * double(n) * n)
    mlp.reset();
  return mlp;
}

// Its work on one input: the Gram matrix and its Cholesky factorisation.
double structured_work(const Model& m, const MlpGramPlan& plan, int n) {
  return mlp_gram_flops(m, plan, n, m.batch * m.tokens) + 2.0 * std::pow(double(n), 3) / 3.0;
}
#endif

}  // namespace

BIASLAB_COLD double structured_gram_flops(const Model& m, int param, int cut) {
#ifndef BIASLAB_LEAN_ENGINE
  if (const std::optional<MlpGramPlan> plan = structured_plan(m, param, cut))
    return structured_work(m, *plan, static_cast<int>(m.params[static_cast<size_t>(param)].value.size()));
#endif
  (void)m, (void)param, (void)cut;
  return 0;
}

BIASLAB_COLD double shared_gram_flops(const Model& m, int param, int cut, int* partner) {
  *partner = -1;
#ifndef BIASLAB_LEAN_ENGINE
  const std::optional<MlpGramPlan> plan = structured_plan(m, param, cut);
  if (!plan) return 0;
  const Op& ao = m.ops[static_cast<size_t>(plan->act)];
  if (ao.kind != OpKind::glu || ao.bg < 0 || ao.bu < 0) return 0;
  // The other bias takes A too where its Gram matrix comes from the same layers: the same op, so
  // the same cut, and the same plan but for which of the two it is.
  const int other = param == ao.bg ? ao.bu : ao.bg;
  const std::optional<MlpGramPlan> theirs = structured_plan(m, other, cut);
  if (!theirs || theirs->lin != plan->lin || theirs->norm != plan->norm) return 0;
  *partner = other;
  return gram_a_flops(m, *plan, static_cast<int>(m.params[static_cast<size_t>(param)].value.size()));
#else
  (void)m, (void)param, (void)cut;
  return 0;
#endif
}

// Cold: once per bias; the factorisation's kernels are Eigen's own functions, not inlined here.
BIASLAB_COLD int injective_cut(const Model& m, int start) {
  const int end = static_cast<int>(m.ops.size());
  int cut = trailing_cut(m, start);
  if (cut >= end) return end;
  // The tail's map is (its last Linear's width) x (the width at the cut) and made only where it
  // may be injective: not wider than tall (a gated FFN's down projection, 90 MB to copy, has a
  // null space), nor of residual ends alone (a whole multiple of the identity, injective: no
  // factorisation of an identity as wide as the model for a bias just before the last one).
  const int width = m.ops[static_cast<size_t>(cut)].in;
  int rows = width;
  bool scales = false;
  for (int i = cut; i < end; ++i) {
    const Op& op = m.ops[static_cast<size_t>(i)];
    if (op.kind == OpKind::linear) rows = op.out;
    scales = scales || (op.kind != OpKind::residual_begin && op.kind != OpKind::residual_end);
  }
  if (rows < width) return end;
  if (!scales) return cut;
  {
    const ColMat A = trailing_map(m, start, cut);
    bool injective = false;
    if (A.rows() == A.cols()) {
      injective = Eigen::PartialPivLU<ColMat>(A).rcond() > 1e-10;
    } else if (A.rows() > A.cols()) {
      const ColMat G = A.transpose() * A;
      injective = Eigen::PartialPivLU<ColMat>(G).rcond() > 1e-14;
    }
    if (!injective) cut = end;
  }
  return cut;
}

int StructureSolver::injective_cut(int start) {
  for (const auto& [s, c] : cut_cache_)
    if (s == start) return c;
  const int cut = biaslab::injective_cut(m_, start);
  cut_cache_.push_back({start, cut});
  return cut;
}

namespace {

// The first op from `at` on, after the bias's own op `start` (its seed enters there), that a
// shared tail can start at: past Linears that do not widen the tangent and the ends of residual
// blocks (plan_rows left none open whose skip carries a tangent of the bias), so that biases
// whose rows start a little apart meet at the same op.
int tail_start(const Model& m, int start, int at, int cut) {
  int p = std::max(at, start + 1);
  for (; p < cut; ++p) {
    const Op& op = m.ops[static_cast<size_t>(p)];
    const bool pass = (op.kind == OpKind::linear && op.out <= op.in) || (op.kind == OpKind::residual_end && !op.parallel);
    if (!pass) break;
  }
  return p;
}

#ifndef BIASLAB_LEAN_ENGINE
// A shared tail's memory (its matrices, over every input and row).
constexpr double kTailBytes = 256.0 * 1024 * 1024;
// The query rows' matrices' (StructureSolver::query_rows_), likewise.
constexpr double kQueryRowBytes = 256.0 * 1024 * 1024;
#endif

}  // namespace

BIASLAB_COLD int StructureSolver::tail_point(int param, const RowPlan& plan, int cut) {
  if (!kTokenRows || !opt_.shared_tails || plan.at < 0) return -1;
  const int p = tail_start(m_, m_.params[static_cast<size_t>(param)].op, plan.at, cut);
  if (p >= cut) return -1;
  const int end = static_cast<int>(m_.ops.size());
  const double w_p = m_.ops[static_cast<size_t>(p)].in, w_cut = cut < end ? m_.ops[static_cast<size_t>(cut)].in : m_.out_features;
  // Ops that all keep a broadcast tangent compact (Linears, BatchNorm in eval mode) carry it at
  // one row per direction, which a matrix per row would undo (and with it the rule that one input
  // settles a Jacobian that does not depend on the input).
  if (std::all_of(m_.ops.begin() + p, m_.ops.begin() + cut, [](const Op& o) { return keeps_broadcast(o); })) return -1;
  // A matrix per row pays off where applying it costs at most an eighth of the ops it stands for.
  if (per_token_flops(m_, p, cut) < 8.0 * w_p * w_cut) return -1;
  // ... and where the biases that pass op p have more directions between them than its width
  // (making the matrices costs as much as that many directions through the ops).
  double demand = 0;
  for (int q = 0; q < static_cast<int>(m_.params.size()); ++q) {
    const ModelParam& mp = m_.params[static_cast<size_t>(q)];
    if (!is_bias_like(mp.role)) continue;
    const int qcut = injective_cut(mp.op);
    if (qcut != cut) continue;
    const RowPlan qp = q == param ? plan : plan_rows(m_, q, qcut, opt_.row_subset_min_flops);
    if (qp.at >= 0 && tail_start(m_, mp.op, qp.at, qcut) == p) demand += double(mp.value.size());
  }
  return demand >= 1.5 * w_p ? p : -1;
}

std::vector<Mat> StructureSolver::tail_rows(int k, const Trace& tr, const TokenRows& sub, int p, int cut, double* flops) {
#ifdef BIASLAB_LEAN_ENGINE
  return {};  // (no token rows: tail_point is -1)
#else
  std::map<Eigen::Index, Mat>& cache = tails_[{k, p, cut}];
  std::vector<Eigen::Index> missing;
  for (Eigen::Index r : sub.rows)
    if (!cache.count(r)) missing.push_back(r);
  std::map<Eigen::Index, Mat> made;
  if (!missing.empty()) {
    const int w_p = m_.ops[static_cast<size_t>(p)].in;
    // One row at a time: a row's matrix is then the same whichever bias asks for it first, with
    // whichever other rows (a product's blocking follows its sizes).
    const int chunk = chunk_directions(m_, p, cut, w_p, 1, w_p, opt_.chunk_elements);
    double bytes = 0;
    for (Eigen::Index r : missing) {
      std::vector<Mat> A = tail_jacobian(m_, tr, take_rows(tr, p, cut, {r}), p, cut, chunk);
      bytes += double(A[0].size()) * sizeof(double);
      made[r] = std::move(A[0]);
    }
    if (tail_bytes_ + bytes <= kTailBytes) {  // else used for this bias alone
      tail_bytes_ += bytes;
      cache.merge(made);
    }
  }
  // Every bias pays for the rows it uses, made now or by an earlier bias: its budget, and so where
  // it stops, does not depend on which biases ran before it (in this engine or another part's).
  *flops += tail_rows_flops(m_, double(sub.rows.size()), p, cut);
  std::vector<Mat> out;
  out.reserve(sub.rows.size());
  for (Eigen::Index r : sub.rows) out.push_back(made.count(r) ? made.at(r) : cache.at(r));
  return out;
#endif
}


namespace {

// The columns of one input's Jacobian as sparse vectors, and its reference scale. Column a is
// the output tangent of the broadcast direction e_a; a broadcast tangent is the column
// 1_N (x) v, kept as w rows scaled by sqrt(N) (the same Gram matrix as N*w rows).
struct InputJacobian {
  std::vector<SparseCol> cols;
  Eigen::Index rows = 0;       // rows of the dense Jacobian (N * output width)
  bool broadcast = true;       // every column stayed broadcast: the Jacobian is input independent
};

// Seeds `dirs` (n, d): column j is a bias direction. Returns the output tangents as a
// (rows, d) column-major matrix (rows = N * width, or width scaled by sqrt(N) when broadcast).
// With token rows `sub`, the rows of its tokens only (N = its rows).
ColMat tangents(const Model& m, const Trace& tr, int param, const ColMat& dirs, int cut, long chunk_elements,
                bool* all_broadcast, const std::function<bool()>& cancelled, bool* stopped, const TokenRows* sub) {
  const int n = static_cast<int>(dirs.rows()), d = static_cast<int>(dirs.cols());
  const int N_all = static_cast<int>(tr.inputs[0].rows());
  const int N = sub ? static_cast<int>(sub->rows.size()) : N_all;
  const int w = cut < static_cast<int>(m.ops.size()) ? m.ops[cut].in : m.out_features;
  const int chunk = row_chunk(m, m.params[param].op, cut, n, N_all, d, chunk_elements, sub);
  ColMat out;
  bool bc_all = true;
  std::vector<std::pair<int, Mat>> parts;
  for (int a0 = 0; a0 < d; a0 += chunk) {
    if (cancelled && cancelled()) {
      *stopped = true;
      return ColMat();
    }
    const int c = std::min(chunk, d - a0);
    Seed s{param, Mat(c, n), true};
    for (int a = 0; a < c; ++a) s.values.row(a) = dirs.col(a0 + a).transpose();
    bool bc = false;
    parts.emplace_back(a0, jvp(m, tr, s, c, cut, &bc, sub));
    if (!bc) bc_all = false;
    if (bc) parts.back().first = -1 - a0;  // marks a compact part
  }
  const Eigen::Index rows = bc_all ? w : Eigen::Index(N) * w;
  out = ColMat::Zero(rows, d);
  for (auto& [tag, t] : parts) {
    const bool compact = tag < 0;
    const int a0 = compact ? -1 - tag : tag;
    const int c = static_cast<int>(compact ? t.rows() : t.rows() / N);
    const Eigen::Index len = compact ? w : Eigen::Index(N) * w;
    for (int a = 0; a < c; ++a) {
      const double* v = t.data() + Eigen::Index(a) * len;
      if (compact && !bc_all) {  // expand 1_N (x) v
        for (int r = 0; r < N; ++r)
          for (int j = 0; j < w; ++j) out(Eigen::Index(r) * w + j, a0 + a) = v[j];
      } else {
        const double sc = compact ? std::sqrt(double(N_all)) : 1.0;  // N_all identical rows
        for (Eigen::Index r = 0; r < len; ++r) out(r, a0 + a) = v[r] * sc;
      }
    }
  }
  *all_broadcast = bc_all;
  return out;
}

// An upper bound on the spectral norm of W: the smaller of its Frobenius norm and
// sqrt(|W|_1 |W|_inf).
double norm_bound(const Mat& W) {
  const double one = W.cwiseAbs().colwise().sum().maxCoeff(), inf = W.cwiseAbs().rowwise().sum().maxCoeff();
  return std::min(W.norm(), std::sqrt(one * inf));
}

// A tall factor compressed to its triangular R (the same Gram matrix).
void compress(ColMat& R, double* flops) {
  const Eigen::Index c = R.cols();
  if (R.rows() <= c) return;
  *flops += 2.0 * double(R.rows()) * double(c) * double(c);
  Eigen::HouseholderQR<ColMat> qr(R);
  R = ColMat(qr.matrixQR().topRows(c).triangularView<Eigen::Upper>());
}

}  // namespace

// tail_bounds (structure.hpp): for every token t of input `tr`, a bound L(t) on how far the per-token ops [at, cut) stretch a
// tangent of token t at op `at`: |output tangent of t| <= L(t) |tangent of t at `at`|. The
// product of each op's largest stretch at that token, by the triangle inequality through
// residual and parallel blocks (plan_rows puts `at` outside any block whose skip carries a
// tangent past it):
//   Linear: its spectral norm (bounded by norm_bound); activation: max |f'| over the token;
//   LayerNorm: max |gain| / sqrt(var + eps) (its centring and projection off the normalised
//   input have norm <= 1); RMSNorm: max |gain| / sqrt(mean(x^2) + eps) likewise; BatchNorm in
//   eval mode: max |gain / sqrt(running_var + eps)|; softmax over features: 1 (its Jacobian
//   diag(p) - p p^T has eigenvalues in [0, max p]); GLU act(g) * u: max |act'(g) u| |W_gate| +
//   max |act(g)| |W_up|.
[[gnu::noinline]] BIASLAB_COLD Vec tail_bounds(const Model& m, const Trace& tr, int at, int cut) {
  const Eigen::Index N = tr.inputs[0].rows();
  Vec c = Vec::Ones(N);
  struct Open {
    Vec input, sum;
    bool parallel = false, tail = false;
  };
  std::vector<Open> open;
  for (int i = 0; i < at; ++i) {
    if (m.ops[i].kind == OpKind::residual_begin) open.push_back({Vec(), Vec(), m.ops[i].parallel, false});
    if (m.ops[i].kind == OpKind::residual_end) open.pop_back();
  }
  for (int i = at; i < cut; ++i) {
    const Op& op = m.ops[i];
    const Mat& x = tr.inputs[static_cast<size_t>(i)];
    switch (op.kind) {
      case OpKind::residual_begin:
        open.push_back({c, c, op.parallel, true});
        break;
      case OpKind::branch_next: {
        Open& o = open.back();
        if (!o.tail) throw std::logic_error("tail_bounds: a parallel block open at the rows' op");
        o.sum += c;
        c = o.input;
        break;
      }
      case OpKind::residual_end: {
        const Open o = std::move(open.back());
        open.pop_back();
        if (o.tail) c += o.parallel ? o.sum : o.input;  // else its skip carries no tangent (plan_rows)
        break;
      }
      case OpKind::linear:
        c *= norm_bound(m.params[op.w].value);
        break;
      case OpKind::position:
        break;
      case OpKind::softmax:
        break;
      case OpKind::activation:
        c.array() *= op.act->derivative(x).cwiseAbs().rowwise().maxCoeff().array();
        break;
      case OpKind::norm: {
        const double gain = op.gain >= 0 ? m.params[op.gain].value.cwiseAbs().maxCoeff() : 1.0;
        if (op.norm == NormKind::batch_eval) {
          const Mat& rv = m.params[op.var].value;
          double s = 0;
          for (Eigen::Index f = 0; f < rv.rows(); ++f)
            s = std::max(s, (op.gain >= 0 ? std::abs(m.params[op.gain].value(f, 0)) : 1.0) / std::sqrt(rv(f, 0) + op.eps));
          c *= s;
        } else if (op.norm == NormKind::layer || op.norm == NormKind::rms) {
          for (Eigen::Index r = 0; r < N; ++r) {
            const double mean = op.norm == NormKind::layer ? x.row(r).mean() : 0.0;
            const double var = (x.row(r).array() - mean).square().mean();
            c(r) *= gain / std::sqrt(var + op.eps);
          }
        } else {
          throw std::logic_error("tail_bounds: a norm over tokens after the rows' op");
        }
        break;
      }
      case OpKind::glu: {
        auto pre = [&](int wi, int bi) {
          Mat z = x * m.params[wi].value.transpose();
          if (bi >= 0) z.rowwise() += m.params[bi].value.col(0).transpose();
          return z;
        };
        const Mat g = pre(op.wg, op.bg), u = pre(op.wu, op.bu);
        const Vec slope = op.act->derivative(g).cwiseProduct(u).cwiseAbs().rowwise().maxCoeff();
        const Vec gate = op.act->f64(g).cwiseAbs().rowwise().maxCoeff();
        c.array() *= (slope * norm_bound(m.params[op.wg].value) + gate * norm_bound(m.params[op.wu].value)).array();
        break;
      }
      case OpKind::attention:
      case OpKind::conv:
        throw std::logic_error("tail_bounds: an op that mixes tokens after the rows' op");
    }
  }
  // Rounding in the bound itself (a few operations per op) is far below this margin.
  return c * (1.0 + 1e-6);
}

namespace {

// The squared norm per token (N) of the tangents of the directions V (each of the bias's size)
// at the input of op `stop`, on every row of input `tr`. Kept out of line: its caller is cold.
[[gnu::noinline]] Vec token_norms(const Model& m, const Trace& tr, int param, const std::vector<Vec>& V, int stop,
                                  long chunk_elements, const std::function<bool()>& cancelled, bool* stopped) {
  const Eigen::Index N = tr.inputs[0].rows();
  const int n = static_cast<int>(m.params[param].value.size()), count = static_cast<int>(V.size());
  Vec tok = Vec::Zero(N);
  const int chunk = chunk_directions(m, m.params[param].op, stop, n, static_cast<int>(N), count, chunk_elements);
  for (int a0 = 0; a0 < count; a0 += chunk) {
    if (cancelled && cancelled()) {
      *stopped = true;
      return tok;
    }
    const int c = std::min(chunk, count - a0);
    Seed s{param, Mat(c, n), true};
    for (int a = 0; a < c; ++a) s.values.row(a) = V[static_cast<size_t>(a0 + a)].transpose();
    bool bc = false;
    const Mat t = jvp(m, tr, s, c, stop, &bc);
    if (bc) tok.array() += t.squaredNorm();
    else
      for (int a = 0; a < c; ++a)
        for (Eigen::Index r = 0; r < N; ++r) tok(r) += t.row(Eigen::Index(a) * N + r).squaredNorm();
  }
  return tok;
}

}  // namespace

[[gnu::noinline]] BIASLAB_COLD double StructureSolver::check_rows(int param, const RowPlan& plan, int cut, const std::vector<Vec>& basis,
                                                int inputs, double tau, const std::function<bool()>& cancelled,
                                                double* flops, bool* computed, bool* stopped) {
  const ModelParam& p = m_.params[param];
  const int n = static_cast<int>(p.value.size()), start = p.op, d = static_cast<int>(basis.size());
  // The bound starts where the seed has entered: at the rows' op, or after it when the seed
  // enters there (a Linear's bias is added inside its op, whose input carries no tangent).
  const int from = plan.at == start ? start + 1 : plan.at;
  // The basis's tangents at every row: up to `from` for the bound, to the cut where computed.
  const double to_from = structural_flops_per_input(m_, p, false, INFINITY, from) * d / std::max(1, n);
  const double every_row = structural_flops_per_input(m_, p, false, INFINITY, cut) * d / std::max(1, n);
  double sq = 0;
  for (int k = 0; k < inputs && std::sqrt(sq) <= tau; ++k) {
    const Trace& tr = pool_.get(k);
    const Vec at = token_norms(m_, tr, param, basis, from, opt_.chunk_elements, cancelled, stopped);
    if (*stopped) return sq;
    *flops += to_from;
    double b = (tail_bounds(m_, tr, from, cut).array().square() * at.array()).sum();
    if (!(std::sqrt(sq + b) <= tau)) {
      b = token_norms(m_, tr, param, basis, cut, opt_.chunk_elements, cancelled, stopped).sum();
      if (*stopped) return sq;
      *flops += every_row;
      *computed = true;
    }
    sq += b;
  }
  return sq;
}

// 32 unit roundoffs of the output's norm: a singular value below it moves the output, for a unit
// bias move, by about as much as rounding does.
constexpr double kRoundingRank = 32 * 0x1.0p-53;

Structure StructureSolver::solve(int param, const std::function<bool()>& cancelled, bool token_rows) {
  const ModelParam& p = m_.params[param];
  const int n = static_cast<int>(p.value.size());
  const int start = p.op;
  const int cut = injective_cut(start);
  Structure out;
  out.size = n;
  out.cut = cut;
  // Token rows: the rank is taken from the last plan.per_sample tokens of each sample, and the
  // null space found is checked on every row at the end.
  const double row_min = token_rows ? opt_.row_subset_min_flops : INFINITY;
  const RowPlan plan = kTokenRows && token_rows ? plan_rows(m_, param, cut, row_min) : RowPlan{};
  std::vector<Eigen::Index> plan_idx;
  if (plan.at >= 0)
    for (int b = 0; b < m_.batch; ++b)
    for (int t = m_.tokens - plan.per_sample; t < m_.tokens; ++t) plan_idx.push_back(Eigen::Index(b) * m_.tokens + t);
  // A shared tail from op tail_p on (tail_point), its matrices for the current input in `tail`.
  const int tail_p = tail_point(param, plan, cut);
  out.tail_at = tail_p;
  std::vector<Mat> tail;
  // A query bias's rows that start right after its attention take a few columns per head
  // through the per-token ops (unit_columns), or through a row's shared tail where there is one
  // (tail_point sets one only where other biases share it: made by whichever asks first, the
  // same matrices in any order, so that the query bias's numbers do not depend on the order the
  // biases run in, nor on how a split analysis groups them).
  // Taken where it pushes fewer vectors a row than the unit directions: Tk < d.
  const bool query_rows = kTokenRows && opt_.query_factors && query_rows_flops(m_, param, plan, cut) > 0;
  if (query_rows) out.tail_at = -1;  // (set where a row's tail is attached)
#ifndef BIASLAB_LEAN_ENGINE
  int row_input = -1;  // the input rows_of took the rows of last (the query rows' matrices are kept by it)
#endif
  auto rows_of = [&](const Trace& tr, int k) {
    if (!kTokenRows || plan.at < 0) return std::optional<TokenRows>();
#ifndef BIASLAB_LEAN_ENGINE
    row_input = k;
#endif
    std::optional<TokenRows> t(take_rows(tr, plan.at, cut, plan_idx));
    if (tail_p >= 0) {
      out.tail_at = tail_p;
      tail = tail_rows(k, tr, *t, tail_p, cut, &out.flops);
      t->tail_at = tail_p;
      t->tail = &tail;
    }
    return t;
  };
  // Kinks on the tangent's way: their units' activity is tracked per input.
  std::vector<int> kinks;
  for (int i = start; i < cut; ++i)
    if (m_.ops[i].kind == OpKind::activation && m_.ops[i].act->kinked) kinks.push_back(i);
  out.kinked = !kinks.empty();
  std::vector<std::vector<int>> active_inputs(kinks.size());  // per unit: inputs that activated it
  for (size_t i = 0; i < kinks.size(); ++i) active_inputs[i].assign(static_cast<size_t>(m_.ops[kinks[i]].in), 0);
  // Every unit direction of one input, and the same work for other directions (per direction:
  // / n), which do not take the one-hot path.
  const double jvp_cost = structural_flops_per_input(m_, p, true, row_min, cut);
  const double dense_cost = structural_flops_per_input(m_, p, false, row_min, cut);
  // The query rows' work for one input (query_rows): at each row, every head's columns of L (Tk at
  // most) through the ops from the rows' op to the shared tail (and its product) or the cut, then
  // K^T times theirs. It is what the budget holds such a row to, not the unit directions' work.
  const double query_cost = query_rows ? query_rows_flops(m_, param, plan, cut, tail_p) : 0;
  // Before its first input such a row is held to that, the shared tail's rows it pays for
  // (tail_rows) and the reference JVP.
  const double input_cost =
      query_rows ? query_cost + dense_cost / std::max(1, n) +
                       (tail_p >= 0 ? tail_rows_flops(m_, double(plan_idx.size()), tail_p, cut) : 0)
                 : jvp_cost;

  UnionFind uf(n);
  std::map<int, Cluster> clusters;  // by union-find root
  double ref_sq = 0, out_sq = 0;
  std::vector<SparseCol> cols;
  std::vector<int> owner, rowpos, pos(n, -1);
  double tau = 0;
  int rank = 0, run = 0, longest_run = 0, inputs = 0;
  // The rarest unit that some input activated, as a fraction of inputs: a direction only such
  // units pass shows up about that rarely, so the run of inputs without gain must be long
  // enough to meet it (about 3 / rate inputs: missed with probability e^-3 per such unit).
  auto rarest_rate = [&]() {
    double r = 1;
    for (const auto& units : active_inputs)
      for (int c : units)
        if (c > 0) r = std::min(r, double(c) / std::max(1, inputs));
    return r;
  };
  int step_size = 1;
  bool confirm_mode = false;  // the last step added no rank: inputs first try to confirm
  bool null_ready = false;    // every cluster's vnull/snull matches its R and tau
  double last_input_cost = input_cost;
  auto stop_cancelled = [&]() {
    out.stop = StopRule::cancelled;
    out.determined = false;
    return out;
  };

  // The null threshold for everything stacked so far: relative to the reference scale, and never
  // below what a unit move could change at the level of the output's rounding (a reference that
  // is itself rounding, e.g. keys of identical tokens, must not turn rounding into rank).
  auto threshold = [&]() { return std::max(opt_.tol_rel * std::sqrt(ref_sq), kRoundingRank * std::sqrt(out_sq)); };
  // The rank of every cluster from its rows (factoring them), with tau for all inputs so far.
  // Returns -1, deciding nothing more, when the next stage could overrun the budget: a first
  // input can be large enough to spend it many times over on its own. (Each stage is checked
  // at its worst case before it starts: the Gram matrices, then the QRs and SVDs.)
  double decision_flops = 0;
  // Whether a cluster's rank decision goes to gram_split when its Gram matrix does not certify
  // full rank (wide, with at least as many rows as columns; the first-load engine, which has no
  // token rows, has neither the Cholesky certificate nor the split).
  auto splits = [&](const Cluster& cl) {
    return kTokenRows && opt_.gram_split && cl.R.cols() >= kCholeskyColumns;
  };
  auto decide = [&]() {
    tau = threshold();
    // First every cluster's Gram matrix (its product, then a Cholesky factorisation or its
    // eigenvalues), which settles full rank; where it does not, every cluster's QR and SVD.
    double gram = 0, rest = 0;
    for (const auto& [root, cl] : clusters) {
      const double r = double(cl.R.rows()), c = double(cl.R.cols());
      gram += r * c * c + (cl.R.cols() >= kCholeskyColumns ? 1.0 : 4.0) * c * c * c;
      // (a wide cluster that gram_split can take: its pivoted Cholesky; a QR and an SVD if that
      // fails, checked then)
      rest += splits(cl) ? c * c * c : 2.0 * r * c * c + 12.0 * c * c * c;
    }
    decision_flops = gram;
    if (out.flops + gram > opt_.max_flops) return -1;
    out.flops += gram;
    bool all_full = true;
    ColMat gram_m;  // the Gram matrix of the wide cluster that stopped the loop (for gram_split)
    [[maybe_unused]] const Cluster* stopped_at = nullptr;
    for (auto& [root, cl] : clusters) {  // full rank everywhere is settled by Gram matrices alone
#ifndef BIASLAB_LEAN_ENGINE
      if (splits(cl) && cl.R.rows() < cl.R.cols()) {  // fewer rows than columns: not full (ranked below)
        cl.full = false;
        all_full = false;
        break;
      }
#endif
      cl.sv = gram_singular_values(cl.R, tau, &cl.sv_bound, &gram_m);
      cl.full = cl.sv.size() > 0;
      if (!cl.full) {
        all_full = false;
        stopped_at = &cl;
        break;
      }
    }
    if (!all_full) {
      decision_flops = rest;
      if (out.flops + rest > opt_.max_flops) return -1;
    }
    int r = 0;
    for (auto& [root, cl] : clusters) {
      cl.svd_v.resize(0, 0);
      if (!all_full) {
        const Eigen::Index c = cl.R.cols();
        bool done = false;
#ifndef BIASLAB_LEAN_ENGINE
        // A wide cluster: certified full from its Gram matrix already, or split by it (gram_split)
        // where it is not, instead of a QR and an SVD.
        cl.split_v.resize(0, 0);
        cl.split_f.resize(0, 0);
        std::optional<double> rows_floor;
        if (splits(cl) && cl.full) {  // certified before the loop stopped
          done = true;
        } else if (splits(cl) && cl.R.rows() < c &&
                   (out.flops += row_rank_flops(cl.R.rows(), c), rows_floor = row_rank_floor(cl.R, tau))) {
          // Of rank m, its rows' count: m singular values above the floor, the rest exactly 0.
          cl.sv = Vec::Zero(c);
          cl.sv.head(cl.R.rows()).setConstant(*rows_floor);
          cl.sv_bound = true;
          cl.full = false;
          ++out.row_ranks;
          done = true;
        } else if (splits(cl)) {
          if (&cl != stopped_at) {  // (its Gram matrix is counted in `gram` above)
            cl.sv = gram_singular_values(cl.R, tau, &cl.sv_bound, &gram_m);
            cl.full = cl.sv.size() > 0;
          }
          if (!cl.full) {
            if (auto split = gram_split(cl.R, std::move(gram_m), tau, &out.flops, opt_.max_flops)) {
              cl.sv.resize(c);
              cl.sv.head(split->rank).setConstant(split->kept);
              cl.sv.tail(c - split->rank).setConstant(split->top);
              cl.sv_bound = true;
              cl.split_v = std::move(split->v);
              cl.split_f = std::move(split->f);
              ++out.gram_splits;
              done = true;
            }
          } else {
            done = true;
          }
          gram_m.resize(0, 0);
        }
#endif
        if (!done) {
          const double qr_svd = 2.0 * double(cl.R.rows()) * double(c) * double(c) + 12.0 * std::pow(double(c), 3);
          if (splits(cl) && out.flops + qr_svd > opt_.max_flops) {  // the split failed: a QR and an SVD
            decision_flops = qr_svd;
            return -1;
          }
          compress(cl.R, &out.flops);
          cl.full = false;
          cl.sv_bound = false;
          cl.sv = singular_values(cl.R, c <= kSvdKeepV ? &cl.svd_v : nullptr);
          out.flops += 12.0 * std::pow(double(c), 3);
        }
      }
      for (Eigen::Index i = 0; i < cl.sv.size(); ++i) r += cl.sv(i) > tau;
    }
    null_ready = false;
    return r;
  };

  // Null bases of every cluster (for confirming inputs), from the factored rows.
  auto prepare_null = [&]() {
    for (auto& [root, cl] : clusters) {
      out.flops += null_space(cl, tau, cl.vnull, cl.snull0);
      cl.snull = ColMat(0, cl.vnull.cols());
    }
    null_ready = true;
  };

  // Every unit direction's tangent on one input, kept as sparse columns in `cols`; returns the
  // rows of the dense Jacobian (N * width, or width when every tangent stayed broadcast).
  Eigen::Index rows = 0;
  auto unit_columns = [&](const Trace& tr, const TokenRows* sub, bool* all_bc, bool* stopped) {
    const int N_all = static_cast<int>(tr.inputs[0].rows());
    const int N = sub ? static_cast<int>(sub->rows.size()) : N_all;
    const int w = cut < static_cast<int>(m_.ops.size()) ? m_.ops[cut].in : m_.out_features;
    const int chunk = row_chunk(m_, start, cut, n, N_all, n, opt_.chunk_elements, sub);
    for (auto& cl : cols) {
      cl.rows.clear();
      cl.vals.clear();
    }
    cols.resize(n);
    bool all_broadcast = true;
    rows = Eigen::Index(N) * w;
#ifndef BIASLAB_LEAN_ENGINE
    // A query bias's token rows (query_rows): at each row, head h's d directions move the output
    // through the columns of L_h alone (at most Tk; query_bias_factors), so those go through the
    // per-token ops (or the row's shared tail) instead of the d unit directions, a chunk at a
    // time, and the d tangents are K_h^T times theirs.
    if (query_rows && sub) {
      const Op& ao = m_.ops[static_cast<size_t>(start)];
      const int H = ao.heads, d = ao.in / H;
      const bool tail = sub->tail && sub->tail_at >= sub->at;
      const int to = tail ? sub->tail_at : cut;
      const int w_to = to < static_cast<int>(m_.ops.size()) ? m_.ops[static_cast<size_t>(to)].in : m_.out_features;
      const bool key = param == ao.bk;  // (a key bias: its heads add up on their key head's d directions)
      const int group = H / ao.kv_heads;
      // The rows the attention's other bias takes through L too (the last `partner_rows` tokens of
      // each sample; 0: none), for which this bias keeps the matrices it makes.
      const int other = key ? ao.bq : ao.bk;
      const RowPlan other_plan = other >= 0 ? plan_rows(m_, other, cut, row_min) : RowPlan{};
      const int partner_rows = other >= 0 && query_rows_flops(m_, other, other_plan, cut) > 0 ? other_plan.per_sample : 0;
      std::map<Eigen::Index, Mat>& shared = query_rows_[{row_input, start, to}];
      Eigen::Index offset = 0;  // the rows stacked so far (each row adds its own count, or w)
      for (int j = 0; j < N; ++j) {
        const Eigen::Index row = sub->rows[static_cast<size_t>(j)];
        const std::vector<QueryFactors> f = *query_bias_factors(m_, ao, tr.attention[static_cast<size_t>(start)], param, row);
        std::vector<Eigen::Index> first(static_cast<size_t>(H) + 1, 0);  // head h's columns: [first[h], first[h + 1])
        for (int h = 0; h < H; ++h) first[static_cast<size_t>(h) + 1] = first[static_cast<size_t>(h)] + f[static_cast<size_t>(h)].L.cols();
        const Eigen::Index count = first.back();
        if (count == 0) continue;  // (no head's query moves this row)
        auto kept = row_input >= 0 ? shared.find(row) : shared.end();
        const bool taken = kept != shared.end();  // (made by the other bias, which is done with it)
        Mat made;  // Z, where not kept
        if (!taken) {
          const TokenRows one = take_rows(tr, sub->at, to, {row});
          const int step = chunk_directions(m_, sub->at, to, ao.in, 1, static_cast<int>(count), opt_.chunk_elements);
          Mat y(count, w_to);
          // A Linear first (the attention's o_proj): each column is one head's d entries, so it
          // takes that head's d columns of the weight, not the whole of it.
          const Op& next = m_.ops[static_cast<size_t>(sub->at)];
          const bool project = to > sub->at && next.kind == OpKind::linear;
          for (Eigen::Index c0 = 0; c0 < count; c0 += step) {
            if (cancelled && cancelled()) {
              *stopped = true;
              return;
            }
            const Eigen::Index c = std::min<Eigen::Index>(step, count - c0);
            Mat init;
            if (project) {
              const Mat& W = m_.params[static_cast<size_t>(next.w)].value;
              init.resize(c, W.rows());
              for (Eigen::Index r = 0, h = 0; r < c;) {  // head h's columns in the chunk: [r, r + k)
                while (first[static_cast<size_t>(h) + 1] <= c0 + r) ++h;
                const Eigen::Index k = std::min<Eigen::Index>(c - r, first[static_cast<size_t>(h) + 1] - c0 - r);
                init.middleRows(r, k).noalias() =
                    f[static_cast<size_t>(h)].L.middleCols(c0 + r - first[static_cast<size_t>(h)], k).transpose() *
                    W.middleCols(h * d, d).transpose();
                r += k;
              }
            } else {
              init = Mat::Zero(c, ao.in);  // column t of L_h in head h's block, for first[h] + t in the chunk
              for (Eigen::Index r = 0, h = 0; r < c; ++r) {
                while (first[static_cast<size_t>(h) + 1] <= c0 + r) ++h;
                init.row(r).segment(h * d, d) = f[static_cast<size_t>(h)].L.col(c0 + r - first[static_cast<size_t>(h)]).transpose();
              }
            }
            const int from = sub->at + (project ? 1 : 0);
            y.middleRows(c0, c) = to > from ? jvp_rows(m_, tr, one, from, to, init, static_cast<int>(c)) : init;
          }
          if (tail) y = y * (*sub->tail)[static_cast<size_t>(j)].transpose();
          // The row's Jacobian is y^T K (w x n; K block-diagonal, head h's keys in its block). With
          // fewer columns than outputs it stands as R K, R the triangular factor of y^T (count x
          // count, the same Gram matrix), so that the stack grows by count rows, not w.
          if (count < w) {
            ColMat yt = y.transpose();
            Eigen::HouseholderQR<Eigen::Ref<ColMat>> qr(yt);
            made = qr.matrixQR().topRows(count).triangularView<Eigen::Upper>().transpose();
          } else {
            made = std::move(y);
          }
          const double bytes = double(made.size()) * sizeof(double);
          const bool theirs = row % m_.tokens >= m_.tokens - partner_rows;
          if (row_input >= 0 && theirs && query_rows_bytes_ + bytes <= kQueryRowBytes) {  // else used here alone
            query_rows_bytes_ += bytes;
            kept = shared.emplace(row, std::move(made)).first;
          }
        }
        out.rows_shared += taken;
        const Mat& Z = kept != shared.end() ? kept->second : made;
        const Eigen::Index stride = Z.cols();
        Mat J;  // (d, stride): the Jacobian's rows here for head h's d directions (a key bias: its key head's)
        for (int h = 0; h < H; ++h) {
          const Eigen::Index h0 = first[static_cast<size_t>(h)], Th = first[static_cast<size_t>(h) + 1] - h0;
          Mat part = Th > 0 ? Mat(f[static_cast<size_t>(h)].K.transpose() * Z.middleRows(h0, Th)) : Mat::Zero(d, stride);
          if (key && h % group != 0) J += part;
          else J = std::move(part);
          if (key && (h + 1) % group != 0) continue;
          const int target = key ? h / group : h;
          for (int e = 0; e < d; ++e)  // rows offset + ...: ascending, as j is
            push_nonzeros(cols[static_cast<size_t>(target * d + e)], J.data() + Eigen::Index(e) * stride, stride, offset);
        }
        offset += stride;
        if (taken) {
          query_rows_bytes_ -= double(kept->second.size()) * sizeof(double);
          shared.erase(kept);
        }
      }
      rows = offset;
      out.flops += query_cost;
      out.query_factors = true;
      *all_bc = false;
      return;
    }
#endif
    for (int a0 = 0; a0 < n; a0 += chunk) {
      if (cancelled && cancelled()) {
        *stopped = true;
        return;
      }
      const int c = std::min(chunk, n - a0);
      Seed s{param, Mat::Zero(c, n), true};  // unit directions, the same for every token
      for (int a = 0; a < c; ++a) s.values(a, a0 + a) = 1.0;
#ifndef BIASLAB_LEAN_ENGINE
      // A q, k or v bias whose Jacobian is taken at its attention's output: each direction's
      // tangent is a few heads' blocks (the rest exactly zero), kept as they come, the same
      // values as the dense tangents' (whose every entry would be scanned).
      if (!sub && cut == start + 1 && m_.ops[start].kind == OpKind::attention) {
        std::vector<std::vector<std::pair<std::array<int, 2>, Mat>>> blocks(static_cast<size_t>(c));
        const bool took = attention_bias_blocks(m_, m_.ops[start], tr.attention[static_cast<size_t>(start)], s, c,
                                                [&](int a, int b, int h, const Mat& block) {
                                                  blocks[static_cast<size_t>(a)].push_back({{b, h}, block});
                                                });
        if (took) {
          const int T = N / m_.batch;
          for (int a = 0; a < c; ++a) {
            const auto& bl = blocks[static_cast<size_t>(a)];  // (in order of sample, then head)
            SparseCol& sc = cols[static_cast<size_t>(a0 + a)];
            for (size_t k = 0; k < bl.size();) {  // the blocks of sample b, row by row (ascending rows)
              size_t e = k;
              while (e < bl.size() && bl[e].first[0] == bl[k].first[0]) ++e;
              const int b = bl[k].first[0];
              for (int i = 0; i < T; ++i)
                for (size_t q = k; q < e; ++q) {
                  const Mat& blk = bl[q].second;
                  push_nonzeros(sc, blk.data() + Eigen::Index(i) * blk.cols(), blk.cols(),
                                (Eigen::Index(b) * T + i) * w + Eigen::Index(bl[q].first[1]) * blk.cols());
                }
              k = e;
            }
          }
          all_broadcast = false;
          continue;
        }
      }
#endif
      bool bc = false;
      const Mat d = jvp(m_, tr, s, c, cut, &bc, sub);
      all_broadcast = all_broadcast && bc;
      const Eigen::Index len = bc ? w : rows;
      const double sc_factor = bc ? std::sqrt(double(N_all)) : 1.0;  // stands for N_all identical rows
      for (int a = 0; a < c; ++a) {
        const double* v = d.data() + Eigen::Index(a) * len;
        SparseCol& sc = cols[a0 + a];
        sc.rows.reserve(static_cast<size_t>(len));
        sc.vals.reserve(static_cast<size_t>(len));
        push_nonzeros(sc, v, len, 0, sc_factor);
      }
    }
    // (Whether a tangent stays broadcast depends on the ops on the way, not on the direction:
    // every chunk agrees.)
    out.flops += jvp_cost;
    *all_bc = all_broadcast;
  };

  // One input along the null space found so far: rows cannot lower a rank, so the rank can grow
  // only there. The input's tangents along the null vectors, Y = J V, are stacked under what
  // earlier confirming inputs added; the input confirms the null space when every singular
  // value stays <= tau, every kept one stays > tau, and Y is at the level of rounding (else the
  // basis, taken from earlier inputs, is less accurate than this input can tell, and the full
  // stack is factored instead). Y comes from d seeded JVPs when the null space is small, else
  // from the unit columns (then kept in `cols` for the full path: *have_cols).
  auto try_confirm = [&](const Trace& tr, const TokenRows* sub, double ref_k, double tau_now, bool* have_cols,
                         bool* stopped) {
    int d_total = 0;
    for (auto& [root, cl] : clusters) {
      for (Eigen::Index i = 0; i < cl.sv.size(); ++i)
        if (cl.sv(i) > tau && !(cl.sv(i) > tau_now)) return false;  // kept before, not now
      d_total += static_cast<int>(cl.vnull.cols());
    }
    if (d_total == 0) return true;
    const int N = sub ? static_cast<int>(sub->rows.size()) : static_cast<int>(tr.inputs[0].rows());
    const int w = cut < static_cast<int>(m_.ops.size()) ? m_.ops[cut].in : m_.out_features;
    std::vector<ColMat> Ys;  // per cluster (in map order): (rows it touches, its null dimension)
    if (4.0 * dense_cost * d_total <= (query_rows ? query_cost : jvp_cost) * n && double(N) * w * d_total <= 8e6) {
      ColMat dirs = ColMat::Zero(n, d_total);
      std::vector<std::pair<int, int>> span;  // per cluster: first column, count
      int at = 0;
      for (auto& [root, cl] : clusters) {
        const int dc = static_cast<int>(cl.vnull.cols());
        for (int j = 0; j < dc; ++j)
          for (size_t i = 0; i < cl.cols.size(); ++i) dirs(cl.cols[i], at + j) = cl.vnull(static_cast<Eigen::Index>(i), j);
        span.push_back({at, dc});
        at += dc;
      }
      bool bc = false;
      const ColMat Y = tangents(m_, tr, param, dirs, cut, opt_.chunk_elements, &bc, cancelled, stopped, sub);
      out.flops += dense_cost * double(d_total) / std::max(1, n);
      if (*stopped) return false;
      // Each cluster's tangents must stay on rows no other cluster's tangents touch (else this
      // input couples clusters, and the full path merges them).
      std::vector<int> row_owner(static_cast<size_t>(Y.rows()), -1);
      for (size_t ci = 0; ci < span.size(); ++ci)
        for (int j = span[ci].first; j < span[ci].first + span[ci].second; ++j)
          for (Eigen::Index r = 0; r < Y.rows(); ++r)
            if (Y(r, j) != 0.0) {
              if (row_owner[r] >= 0 && row_owner[r] != static_cast<int>(ci)) return false;
              row_owner[r] = static_cast<int>(ci);
            }
      for (size_t ci = 0; ci < span.size(); ++ci) {
        std::vector<Eigen::Index> rws;
        for (Eigen::Index r = 0; r < Y.rows(); ++r)
          if (row_owner[r] == static_cast<int>(ci)) rws.push_back(r);
        ColMat Yc(static_cast<Eigen::Index>(rws.size()), span[ci].second);
        for (size_t r = 0; r < rws.size(); ++r) Yc.row(static_cast<Eigen::Index>(r)) = Y.block(rws[r], span[ci].first, 1, span[ci].second);
        Ys.push_back(std::move(Yc));
      }
    } else {
      bool bc = false;
      unit_columns(tr, sub, &bc, stopped);
      if (*stopped) return false;
      *have_cols = true;
      owner.assign(static_cast<size_t>(rows), -1);
      int ci = 0;
      for (auto& [root, cl] : clusters) {
        for (int a : cl.cols)
          for (int r : cols[a].rows) {
            if (owner[r] >= 0 && owner[r] != ci) return false;
            owner[r] = ci;
          }
        ++ci;
      }
      rowpos.assign(static_cast<size_t>(rows), -1);
      ci = 0;
      for (auto& [root, cl] : clusters) {
        const Eigen::Index c = static_cast<Eigen::Index>(cl.cols.size());
        int count = 0;
        for (int a : cl.cols)
          for (int r : cols[a].rows)
            if (rowpos[r] < 0) rowpos[r] = count++;
        ColMat J = ColMat::Zero(count, c);
        for (Eigen::Index j = 0; j < c; ++j) {
          const SparseCol& sc = cols[cl.cols[j]];
          for (size_t e = 0; e < sc.rows.size(); ++e) J(rowpos[sc.rows[e]], j) = sc.vals[e];
        }
        Ys.push_back(cl.vnull.cols() > 0 ? ColMat(J * cl.vnull) : ColMat(count, 0));
        out.flops += 2.0 * double(count) * double(c) * double(cl.vnull.cols());
        ++ci;
      }
    }
    const double accurate = opt_.confirm_rel * ref_k;
    std::vector<ColMat> next;
    size_t ci = 0;
    for (auto& [root, cl] : clusters) {
      const ColMat& Yc = Ys[ci++];
      const Eigen::Index dc = cl.vnull.cols();
      if (dc == 0) {
        next.emplace_back();
        continue;
      }
      // Tangents above rounding: the rank may grow, or the basis is less accurate than this
      // input can tell. Either way the full stack decides.
      if (Yc.rows() > 0 && Yc.colwise().norm().maxCoeff() > accurate) return false;
      ColMat S(cl.snull.rows() + Yc.rows(), dc);
      S.topRows(cl.snull.rows()) = cl.snull;
      S.bottomRows(Yc.rows()) = Yc;
      compress(S, &out.flops);
      ColMat all(dc + S.rows(), dc);
      all.topRows(dc) = cl.snull0;
      all.bottomRows(S.rows()) = S;
      const Vec s_new = singular_values(all);
      if (s_new.size() > 0 && s_new(0) > tau_now) return false;
      next.push_back(std::move(S));
    }
    ci = 0;
    for (auto& [root, cl] : clusters) {
      if (cl.vnull.cols() > 0) cl.snull = std::move(next[ci]);
      ++ci;
    }
    return true;
  };

  // The full path for one input: the clusters of columns that share output entries, and the
  // input's rows stacked under each cluster's factor.
  auto stack_full = [&]() {
    // Columns that share a non-zero output entry belong together. A column with an entry in
    // every row shares one with every non-empty column: one cluster, no entry-by-entry pass.
    owner.assign(static_cast<size_t>(rows), -1);
    int full = -1;
    for (int a = 0; a < n && full < 0; ++a)
      if (static_cast<Eigen::Index>(cols[a].rows.size()) == rows) full = a;
    if (full >= 0) {
      for (int a = 0; a < n; ++a)
        if (!cols[a].rows.empty()) uf.unite(a, full);
      std::fill(owner.begin(), owner.end(), full);
    } else {
      for (int a = 0; a < n; ++a)
        for (int r : cols[a].rows) {
          if (owner[r] < 0) owner[r] = a;
          else uf.unite(a, owner[r]);
        }
    }
    std::map<int, std::vector<int>> group_cols, group_rows;
    for (int a = 0; a < n; ++a) group_cols[uf.find(a)].push_back(a);
    for (Eigen::Index r = 0; r < rows; ++r)
      if (owner[r] >= 0) group_rows[uf.find(owner[r])].push_back(static_cast<int>(r));
    rowpos.assign(static_cast<size_t>(rows), -1);

    std::map<int, Cluster> next;
    for (auto& [root, gcols] : group_cols) {
      for (size_t i = 0; i < gcols.size(); ++i) pos[gcols[i]] = static_cast<int>(i);
      // The rows of merged clusters, and what confirming inputs added along their null spaces
      // (S V^T: the same Gram matrix along V as those inputs' rows).
      std::vector<const ColMat*> blocks;
      std::vector<const std::vector<int>*> block_cols;
      std::vector<ColMat> svt;
      svt.reserve(clusters.size());  // blocks point into it: it must not reallocate
      Eigen::Index old_rows = 0;
      for (const auto& [oroot, oc] : clusters)
        if (uf.find(oroot) == root) {
          blocks.push_back(&oc.R);
          block_cols.push_back(&oc.cols);
          old_rows += oc.R.rows();
          if (oc.snull.rows() > 0 && oc.vnull.cols() > 0) {
            svt.push_back(oc.snull * oc.vnull.transpose());
            blocks.push_back(&svt.back());
            block_cols.push_back(&oc.cols);
            old_rows += svt.back().rows();
          }
        }
      const std::vector<int>& rws = group_rows[root];
      const Eigen::Index ncol = static_cast<Eigen::Index>(gcols.size());
      ColMat M = ColMat::Zero(old_rows + static_cast<Eigen::Index>(rws.size()), ncol);
      Eigen::Index at = 0;
      for (size_t b = 0; b < blocks.size(); ++b) {
        const ColMat& B = *blocks[b];
        for (size_t j = 0; j < block_cols[b]->size(); ++j)
          M.block(at, pos[(*block_cols[b])[j]], B.rows(), 1) = B.col(static_cast<Eigen::Index>(j));
        at += B.rows();
      }
      for (size_t i = 0; i < rws.size(); ++i) rowpos[rws[i]] = static_cast<int>(i);
      for (Eigen::Index j = 0; j < ncol; ++j) {
        const SparseCol& sc = cols[gcols[j]];
        for (size_t e = 0; e < sc.rows.size(); ++e) M(at + rowpos[sc.rows[e]], j) = sc.vals[e];
      }
      // Stacks that grow tall over the inputs of one step are compressed as they grow (a
      // triangular factor with the same Gram matrix); otherwise the rank decision factors them,
      // or settles full rank from the Gram matrix without a QR.
      if (M.rows() > 4 * ncol && double(M.size()) > 4e6) {
        const double qr = 2.0 * double(M.rows()) * double(ncol) * double(ncol);
        if (out.flops + qr <= opt_.max_flops) compress(M, &out.flops);
        // else left tall: the rank decision sees it is over the budget
      }
      Cluster cl;
      cl.cols = gcols;
      cl.R = std::move(M);
      next[root] = std::move(cl);
    }
    clusters = std::move(next);
    null_ready = false;
  };

  // Whether every null direction's tangent vanishes at the input of op `stop` (to rounding,
  // relative to the reference there) on input `tr`.
  auto null_vanishes_before = [&](const Trace& tr, int stop, bool* stopped) {
    const int N = static_cast<int>(tr.inputs[0].rows());
    Rng rng(0x5eedULL, p.name + ".kink");
    const Eigen::Index rows = seed_rows(m_, param, N);
    Seed ref{param, Mat(rows, n)};
    for (Eigen::Index r = 0; r < rows; ++r)
      for (int j = 0; j < n; ++j) ref.values(r, j) = rng.normal() / std::sqrt(double(n));
    const double ref_norm = jvp(m_, tr, ref, 1, stop).norm();
    const double limit = opt_.confirm_rel * ref_norm;
    std::vector<Vec> dirs;
    for (auto& [root, cl] : clusters)
      for (Eigen::Index j = 0; j < cl.vnull.cols(); ++j) {
        Vec v = Vec::Zero(n);
        for (size_t i = 0; i < cl.cols.size(); ++i) v(cl.cols[i]) = cl.vnull(static_cast<Eigen::Index>(i), j);
        dirs.push_back(v);
      }
    const int d = static_cast<int>(dirs.size());
    const int w = m_.ops[stop].in;
    const int chunk = chunk_directions(m_, start, stop, n, N, d, opt_.chunk_elements);
    for (int a0 = 0; a0 < d; a0 += chunk) {
      if (cancelled && cancelled()) {
        *stopped = true;
        return false;
      }
      const int c = std::min(chunk, d - a0);
      Seed s{param, Mat(c, n), true};
      for (int a = 0; a < c; ++a) s.values.row(a) = dirs[static_cast<size_t>(a0 + a)].transpose();
      bool bc = false;
      const Mat t = jvp(m_, tr, s, c, stop, &bc);
      const Eigen::Index len = bc ? w : Eigen::Index(N) * w;
      const double sc = bc ? std::sqrt(double(N)) : 1.0;
      for (int a = 0; a < c; ++a) {
        const double nrm = Eigen::Map<const Vec>(t.data() + Eigen::Index(a) * len, len).norm() * sc;
        if (!(nrm <= limit)) return false;
      }
    }
    out.flops += dense_cost * double(d) / std::max(1, n);
    return true;
  };
  bool kink_checked = false, kink_irrelevant = false, over_budget_decision = false;
  // An MLP's first bias, wide: its Gram matrix over every token from the layers' factors, where
  // that can be of full rank and costs less than the stacked rows' (mlp_gram).
  [[maybe_unused]] bool structured = false;
#ifndef BIASLAB_LEAN_ENGINE
  std::optional<MlpGramPlan> mlp;
  if (opt_.structured_gram && token_rows) mlp = structured_plan(m_, param, cut);  // (not again where every row is ranked)
  // Where the factors do not certify full rank, the stacked rows decide if they fit the limit
  // (analyze() does not hold such a bias to it up front); else this many entries stop it.
  double rows_over_limit = 0;
  bool rows_over_budget = false, gram_tried = false;
  if (mlp) last_input_cost = structured_work(m_, *mlp, n);  // the first input's, where it certifies
#endif

  for (;;) {
    // Plan the step: as many inputs as the rule or the rate of gain asks for, within budget.
    const int want = std::max(1, step_size);
    int done = 0;
    bool full_path = false, stopped = false, new_units = false, input_independent = false;
    for (int i = 0; i < want; ++i) {
      if (inputs >= opt_.max_samples || out.flops + last_input_cost > opt_.max_flops) break;
      if (cancelled && cancelled()) return stop_cancelled();
      const double before = out.flops;
      const Trace& tr = pool_.get(inputs);
      const int N = static_cast<int>(tr.inputs[0].rows());
      ++inputs;
      ++done;
      // Reference scale: a random perturbation of the same tensor that differs per token (unit
      // norm per token, like a unit broadcast direction) is generically visible in the output.
      Rng rng(0x5eedULL + static_cast<std::uint64_t>(inputs - 1), p.name);
      const Eigen::Index rows = seed_rows(m_, param, N);
      Seed ref{param, Mat(rows, n)};
      for (Eigen::Index r = 0; r < rows; ++r)
        for (int j = 0; j < n; ++j) ref.values(r, j) = rng.normal() / std::sqrt(double(n));
      const Mat dref = jvp(m_, tr, ref, 1, cut);
      ref_sq += dref.squaredNorm();
      out_sq += (cut < static_cast<int>(m_.ops.size()) ? tr.inputs[static_cast<size_t>(cut)] : tr.output).squaredNorm();
      out.flops += dense_cost / std::max(1, n);
      for (size_t q = 0; q < kinks.size(); ++q) {
        const Mat& x = tr.inputs[static_cast<size_t>(kinks[q])];
        for (Eigen::Index f = 0; f < x.cols(); ++f)
          if ((x.col(f).array() > 0).any()) {
            int& c = active_inputs[q][static_cast<size_t>(f)];
            if (c == 0 && inputs > 1) new_units = true;
            ++c;
          }
      }
#ifndef BIASLAB_LEAN_ENGINE
      if (mlp && inputs == 1) {
        const double work = structured_work(m_, *mlp, n);
        if (out.flops + work <= opt_.max_flops) {
          tau = threshold();
          const Op& ao = m_.ops[static_cast<size_t>(mlp->act)];
          const std::array<int, 2> key{mlp->lin, mlp->norm};
          const bool share = ao.kind == OpKind::glu && ao.bg >= 0 && ao.bu >= 0;
          const bool have = share && gram_a_key_ == key && gram_a_.size() > 0;
          if (!have) gram_a_ = ColMat();  // (a kept A no other bias will take)
          StructuredGram sg = mlp_gram(m_, tr, *mlp, have ? &gram_a_ : nullptr, share && !have ? &gram_a_ : nullptr);
          gram_a_key_ = share && !have ? key : std::array<int, 2>{-1, -1};
          out.flops += work;
          gram_tried = true;
          if (const std::optional<double> floor = cholesky_floor(sg.G, sg.trace, sg.err, tau)) {
            Cluster cl;
            cl.cols.resize(static_cast<size_t>(n));
            std::iota(cl.cols.begin(), cl.cols.end(), 0);
            cl.R = ColMat(0, n);
            cl.sv = Vec::Constant(n, *floor);
            cl.sv_bound = true;
            cl.full = true;
            clusters.clear();
            clusters[0] = std::move(cl);
            structured = true;
            break;
          }
        }
        const int w = cut < static_cast<int>(m_.ops.size()) ? m_.ops[static_cast<size_t>(cut)].in : m_.out_features;
        const double entries = double(n) * stacked_rows(m_, param, cut) * w;
        if (entries > opt_.max_jacobian_entries) {
          rows_over_limit = entries;
          break;
        }
        // The stacked rows' JVPs are held to the budget as they would have been without this try.
        last_input_cost = jvp_cost;
        if (out.flops + jvp_cost > opt_.max_flops) {
          rows_over_budget = true;
          break;
        }
      }
#endif
      bool have_cols = false;
      const std::optional<TokenRows> sub = rows_of(tr, inputs - 1);
      const TokenRows* subp = sub ? &*sub : nullptr;
      if (confirm_mode) {
        if (!null_ready) prepare_null();
        const double tau_now = threshold();
        if (try_confirm(tr, subp, dref.norm(), tau_now, &have_cols, &stopped)) {
          last_input_cost = out.flops - before;
          continue;
        }
        if (stopped) return stop_cancelled();
      }
      bool bc = false;
      if (!have_cols) unit_columns(tr, subp, &bc, &stopped);
      if (stopped) return stop_cancelled();
      stack_full();
      full_path = true;
      input_independent = inputs == 1 && bc;
      last_input_cost = out.flops - before;
      if (confirm_mode) break;  // the rank may have grown: decide now and plan again
    }
    if (structured) {
      rank = n;
      out.rank_history.push_back(n);
      out.inputs_history.push_back(inputs);
      out.structured_gram = true;
      out.stop = StopRule::full_rank;
      break;
    }
#ifndef BIASLAB_LEAN_ENGINE
    if (rows_over_limit > 0 || rows_over_budget) {
      out.stop = StopRule::budget;
      break;
    }
#endif
    if (done == 0) {
      out.stop = StopRule::budget;
      break;
    }
    const int before_rank = rank;
    if (full_path) {
      const int r = decide();
      if (r < 0) {  // ranking this step's stack would overrun the budget: rank stays a lower bound
        out.rank_history.push_back(rank);
        out.inputs_history.push_back(inputs);
        out.stop = StopRule::budget;
        over_budget_decision = true;
        break;
      }
      rank = r;
    } else {
      tau = threshold();
    }
    out.rank_history.push_back(rank);
    out.inputs_history.push_back(inputs);
    const bool gained = rank > before_rank;
    if (rank == n) {
      out.stop = StopRule::full_rank;
      break;
    }
    if (input_independent) {  // no op on the way depends on the tokens: one input says all
      out.input_independent = true;
      out.stop = StopRule::input_independent;
      break;
    }
    if (gained || (new_units && !kink_irrelevant)) {
      longest_run = std::max(longest_run, run);
      run = 0;
    } else {
      run += done;
    }
    // A kink matters only to null directions whose tangent reaches it. When the null space's
    // tangent already vanishes (to rounding) at a kink's input, on a random input, it vanishes
    // there for every input (the map up to the kink is analytic in the input: where J V is 0 is
    // everywhere or a set of measure zero). Every kink is checked, not the first in op order: a
    // residual skip or a parallel block's sum carries the tangent past an earlier kink, and a
    // kink in a later branch of the seed's parallel block sees no tangent at all.
    if (out.kinked && !gained && !kink_checked && rank < n) {
      kink_checked = true;
      if (!null_ready) prepare_null();
      kink_irrelevant = true;
      for (int k : kinks) {
        kink_irrelevant = null_vanishes_before(pool_.get(inputs - 1), k, &stopped);
        if (stopped) return stop_cancelled();
        if (!kink_irrelevant) break;
      }
    }
    const bool kinked_rule = out.kinked && !kink_irrelevant;
    const int needed = kinked_rule ? std::max({opt_.kink_patience, 2 * longest_run,
                                               static_cast<int>(std::ceil(3.0 / rarest_rate()))})
                                   : 1;
    if (!gained && inputs >= opt_.min_samples && run >= needed) {
      out.stop = kinked_rule ? StopRule::no_gain_kinked : StopRule::no_gain;
      break;
    }
    if (gained) {
      // The inputs the rest of the rank needs at the rate just seen (one step, not one per input).
      const double rate = double(rank - before_rank) / done;
      step_size = static_cast<int>(std::ceil(double(n - rank) / std::max(rate, 1e-9)));
      // One more input may well end the loop: it first tries to confirm the null space (cheap
      // along a small one), and takes the full path only if the rank grows.
      confirm_mode = step_size == 1;
    } else {
      step_size = std::max({needed - run, opt_.min_samples - inputs, 1});
      confirm_mode = true;
    }
    if (inputs >= opt_.max_samples || out.flops + last_input_cost > opt_.max_flops) {
      out.stop = StopRule::budget;
      break;
    }
  }
  out.samples = inputs;
  out.final_run = run;
  for (const auto& units : active_inputs)
    for (int c : units) out.inactive_units += c == 0;
  if (out.kinked) out.rarest_unit_rate = rarest_rate();
  out.reference = std::sqrt(ref_sq);
  out.clusters = static_cast<int>(clusters.size());
  if (out.stop == StopRule::budget) {
    out.determined = false;
    out.redundant_dim_min = 0;
    out.redundant_dim_max = n - rank;
    out.redundant_dim = n - rank;
    char buf[320];
    if (over_budget_decision)
      std::snprintf(buf, sizeof buf,
                    "ranking the Jacobian stacked over %d input%s would take up to %.3g GFLOP more (%.3g spent), over the "
                    "budget of %.3g GFLOP a bias: the rank found, %d of %d, is a lower bound",
                    inputs, inputs == 1 ? "" : "s", decision_flops / 1e9, out.flops / 1e9, opt_.max_flops / 1e9, rank, n);
    else
      std::snprintf(buf, sizeof buf,
                    "a budget ran out before a stopping rule held (%d inputs stacked, at most %d; %.3g GFLOP spent, "
                    "budget %.3g GFLOP a bias): the rank found, %d of %d, is a lower bound that more inputs could raise",
                    inputs, opt_.max_samples, out.flops / 1e9, opt_.max_flops / 1e9, rank, n);
    if (kTokenRows && plan.at >= 0) {
      out.rows_per_sample = plan.per_sample;
      out.rows_check = "not reached";
    }
    out.stop_note = std::string(buf) + (kTokenRows && plan.at >= 0 ? " (from the last " + std::to_string(plan.per_sample) + " token(s) of each sample)" : "");
#ifndef BIASLAB_LEAN_ENGINE
    if (rows_over_limit > 0 || rows_over_budget) {
      const std::string gram = gram_tried ? "its Gram matrix over every token, built from the layers' factors, did not certify full rank"
                                          : "its Gram matrix over every token, built from the layers' factors, would pass its budget";
      if (rows_over_limit > 0)
        std::snprintf(buf, sizeof buf,
                      "%s, and ranking its stacked rows would need a Jacobian of %.0f M entries (the limit is %.0f M): "
                      "between 0 and %d of its %d directions are redundant",
                      gram.c_str(), rows_over_limit / 1048576.0, opt_.max_jacobian_entries / 1048576.0, n, n);
      else
        std::snprintf(buf, sizeof buf,
                      "%s, and ranking its stacked rows would take about %.3g GFLOP more (%.3g spent), over the budget "
                      "of %.3g GFLOP a bias: between 0 and %d of its %d directions are redundant",
                      gram.c_str(), jvp_cost / 1e9, out.flops / 1e9, opt_.max_flops / 1e9, n, n);
      out.stop_note = buf;
    }
#endif
    return out;
  }

  // Null space per cluster, embedded in the full coordinate space. When the last inputs only
  // confirmed it, the basis is the one they confirmed (at the level of rounding).
  if (!null_ready) prepare_null();
  std::vector<Vec> basis;
  double null_max = 0, kept_min = 0;
  for (const auto& [root, cl] : clusters) {
    const int c = static_cast<int>(cl.cols.size());
    int kept = 0;
    for (Eigen::Index i = 0; i < cl.sv.size(); ++i)
      if (cl.sv(i) > tau) {
        ++kept;
        kept_min = kept_min == 0 ? cl.sv(i) : std::min(kept_min, cl.sv(i));
        out.sigma_bounds = out.sigma_bounds || cl.sv_bound;
      }
    if (cl.vnull.cols() > 0) {
      ColMat all(cl.vnull.cols() + cl.snull.rows(), cl.vnull.cols());
      all.topRows(cl.vnull.cols()) = cl.snull0;
      all.bottomRows(cl.snull.rows()) = cl.snull;
      null_max = std::max(null_max, singular_values(all).maxCoeff());
    }
    if (kept == c) continue;
    for (Eigen::Index j = 0; j < cl.vnull.cols(); ++j) {
      Vec v = Vec::Zero(n);
      for (int i = 0; i < c; ++i) v(cl.cols[i]) = cl.vnull(i, j);
      basis.push_back(v);
    }
  }
  // Token rows: the rank so far is that of the tokens' rows, a lower bound on the rank of every
  // row. The null space V found (d directions) is checked on every row of every input stacked:
  // if |J V| <= tau over all of them, the (n - d + 1)-th singular value of the whole stack is at
  // most tau (min-max), so its rank is the same, and V its null space. |J V| is bounded from the
  // tangents at the rows' op through the per-token ops after it (tail_bounds), which is cheap
  // (those ops are the cost the rows save) and far from tight but ample where V is null to
  // rounding; where it is too loose (a direction a later norm removes), J V itself is computed.
  std::string rows_note;
  if (kTokenRows && plan.at >= 0 && !basis.empty() && !out.input_independent) {
    const int d = static_cast<int>(basis.size());
    bool computed = false, stopped = false;
    const double sq = check_rows(param, plan, cut, basis, inputs, tau, cancelled, &out.flops, &computed, &stopped);
    if (stopped) return stop_cancelled();
    if (!(std::sqrt(sq) <= tau)) {
      // Every row has rank the tokens' rows missed: rank from every row, if that fits.
      const int w = cut < static_cast<int>(m_.ops.size()) ? m_.ops[cut].in : m_.out_features;
      const double entries = double(n) * m_.batch * m_.tokens * w;
      if (entries > opt_.max_jacobian_entries) {
        out.determined = false;
        out.redundant_dim_min = 0;
        out.redundant_dim_max = n - rank;
        out.redundant_dim = n - rank;
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "the null space found from the last %d token(s) of each sample does not hold on every token, and "
                      "ranking every row would need a Jacobian of %.0f M entries (the limit is %.0f M): the rank "
                      "found, %d of %d, is a lower bound",
                      plan.per_sample, entries / 1048576.0, opt_.max_jacobian_entries / 1048576.0, rank, n);
        out.stop_note = buf;
        out.stop = StopRule::budget;
        out.rows_per_sample = plan.per_sample;
        out.rows_check = "failed";
        return out;
      }
      Structure again = solve(param, cancelled, false);
      again.flops += out.flops;
      return again;
    }
    out.rows_per_sample = plan.per_sample;
    out.rows_check = computed ? "computed" : "bound";
    out.sigma_bounds = true;
    null_max = std::max(null_max, std::sqrt(sq));
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; ranked from the last %d token(s) of each sample, its %d null direction(s) then checked on every "
                  "token of the %d input(s) (%s): their tangents stay within the threshold",
                  plan.per_sample, d, inputs, computed ? "computed" : "bounded through the per-token layers");
    rows_note = buf;
#ifndef BIASLAB_LEAN_ENGINE  // (the first-load engine has no structured Gram matrix: its bytes count)
  } else if (out.structured_gram) {
    const Op& at = m_.ops[static_cast<size_t>(p.op)];
    rows_note = std::string("; certified on every token at once, from a Gram matrix built from ") +
                (at.kind != OpKind::glu ? "the activation's derivatives"
                 : at.bg == param       ? "each token's gate slope times its up projection"
                                        : "each token's activated gate") +
                " and the next layers' weights";
    out.sigma_bounds = true;
#endif
  } else if (kTokenRows && plan.at >= 0 && basis.empty()) {
    rows_note = "; ranked from the last " + std::to_string(plan.per_sample) +
                " token(s) of each sample (full rank there is full rank on every row)";
    out.rows_per_sample = plan.per_sample;
    out.rows_check = "none";
    out.sigma_bounds = true;
  }
  out.redundant_dim = static_cast<int>(basis.size());
  out.redundant_dim_min = out.redundant_dim_max = out.redundant_dim;
  // Under the kinked rule, units that no input activated may carry directions that look null
  // only because nothing reached them: each could hide one. Without a way to tell a dead unit
  // from a rare one, only bounds hold.
  if (out.stop == StopRule::no_gain_kinked && out.inactive_units > 0 && out.redundant_dim > 0) {
    out.determined = false;
    out.redundant_dim_min = std::max(0, out.redundant_dim - out.inactive_units);
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%d ReLU unit(s) on the way were never active over %d inputs: each may be dead (its directions then "
                  "are redundant) or only rarely active (then an input that activates it adds rank), so %d to %d of %d "
                  "directions are redundant",
                  out.inactive_units, inputs, out.redundant_dim_min, out.redundant_dim, n);
    out.stop_note = buf + rows_note;
    return out;
  }
  out.null_basis.resize(n, out.redundant_dim);
  for (int j = 0; j < out.redundant_dim; ++j) out.null_basis.col(j) = basis[j];
  out.null_max = out.reference > 0 ? null_max / out.reference : 0;
  out.kept_min = out.reference > 0 ? kept_min / out.reference : 0;
  char buf[640];  // the longest note is about 480 characters
  switch (out.stop) {
    case StopRule::full_rank:
      std::snprintf(buf, sizeof buf, "full rank after %d inputs: nothing is redundant", inputs);
      break;
    case StopRule::input_independent:
      std::snprintf(buf, sizeof buf, "the Jacobian does not depend on the input (no op on the way treats tokens differently): one input decides");
      break;
    case StopRule::no_gain:
      std::snprintf(buf, sizeof buf,
                    "an input added no rank (after %d inputs); %s, so the Jacobian is analytic in the input and a further "
                    "random input that could add rank does so with probability 1",
                    inputs,
                    out.kinked ? "the null directions vanish before every ReLU on the way (checked on a random input)"
                               : "nothing on the way is kinked");
      break;
    default: {
      const double miss = std::pow(0.9, run);
      std::snprintf(buf, sizeof buf,
                    "a ReLU lies on the way: %d inputs in a row added no rank and activated no unit for the first time "
                    "(the rule asks for at least %d, twice the longest such run before the last gain, and 3 / the "
                    "rate of the rarest active unit, %.3g); a further direction that 10%% of inputs reach would have "
                    "been missed with probability 0.9^%d = %.1e%s",
                    run, opt_.kink_patience, out.rarest_unit_rate, run, miss,
                    out.inactive_units > 0 ? "; some units were never active, and directions only they pass are counted as redundant here" : "");
      break;
    }
  }
  out.stop_note = buf + rows_note;
  return out;
}

}  // namespace biaslab
