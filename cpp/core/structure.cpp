#include "core/structure.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "core/rng.hpp"

namespace biaslab {

const Trace& TracePool::get(int k) {
  if (w_.empty()) w_ = cast_weights<double>(m_);
  while (static_cast<int>(traces_.size()) <= k) {
    Trace t;
    const Mat x = draw_input(cfg_, static_cast<int>(traces_.size()) + 1);
    forward<double>(m_, w_, x, {}, &t);
    traces_.push_back(std::move(t));
  }
  return traces_[k];
}

namespace {

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

struct Cluster {
  std::vector<int> cols;  // bias coordinates, ascending
  ColMat R;               // (<= cols.size(), cols.size()): R^T R = stacked J^T J on these columns
  Vec sv;                 // singular values of the stacked Jacobian on these columns
  bool full = false;      // certified of full column rank from the Gram matrix (R not formed)
  // Set when the last input only confirmed the null space (see confirm_null_space): an
  // orthonormal basis of it and the singular values of the stack along it.
  bool confirmed = false;
  ColMat vnull;
  Vec snull;
};

// The numerical null space of a factored cluster: the right singular vectors whose singular
// values are <= tau (c - kept columns), and those values (0 where R has fewer rows than columns).
void null_space(const Cluster& cl, double tau, ColMat& v, Vec& s) {
  const Eigen::Index c = static_cast<Eigen::Index>(cl.cols.size());
  Eigen::Index kept = 0;
  for (Eigen::Index i = 0; i < cl.sv.size(); ++i) kept += cl.sv(i) > tau;
  const Eigen::Index d = c - kept;
  s = Vec::Zero(d);
  if (kept == 0 || cl.R.rows() == 0) {
    v = ColMat::Identity(c, c).rightCols(d);
    for (Eigen::Index i = 0; i < d && i < cl.sv.size(); ++i) s(i) = cl.sv(i);
    return;
  }
  Eigen::BDCSVD<ColMat> svd(cl.R, Eigen::ComputeFullV);
  v = svd.matrixV().rightCols(d);
  const Vec& all = svd.singularValues();
  for (Eigen::Index i = 0; i < d; ++i)
    if (kept + i < all.size()) s(i) = all(kept + i);
}

Vec singular_values(const ColMat& R) {
  if (R.rows() == 0 || R.cols() == 0) return Vec();
  if (R.cols() == 1) return Vec::Constant(1, R.col(0).norm());
  if (R.rows() > 2 * R.cols()) {  // tall: the same singular values from its triangular factor
    Eigen::HouseholderQR<ColMat> qr(R);
    const ColMat T = qr.matrixQR().topRows(R.cols()).triangularView<Eigen::Upper>();
    return Eigen::BDCSVD<ColMat>(T).singularValues();
  }
  Eigen::BDCSVD<ColMat> svd(R);
  return svd.singularValues();
}

// Singular values of M (m x c) from its Gram matrix when that certifies full column rank with
// every singular value far above `tau`; empty otherwise (the caller then factors M).
// Forming G = M^T M in floating point errs by at most about m u |M|_F^2 (u = 2^-53) and a
// symmetric eigensolver adds about c u |G|; with err twice their sum, each eigenvalue of G is
// within err of sigma^2. Accepted only when the smallest is above 1e6 err (sigma then has about
// 6 correct digits) and sigma_min - its uncertainty stays above 2 tau. Cheaper than a QR when
// the answer is "full rank", which is the common case for effective biases.
Vec gram_singular_values(const ColMat& M, double tau) {
  const Eigen::Index m = M.rows(), c = M.cols();
  if (m < c || c == 0) return Vec();
  ColMat G = ColMat::Zero(c, c);
  G.selfadjointView<Eigen::Lower>().rankUpdate(M.transpose());
  const double fro2 = M.squaredNorm();
  const double err = 2.0 * double(m + c + 8) * 0x1.0p-53 * fro2;
  Eigen::SelfAdjointEigenSolver<ColMat> es(G, Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) return Vec();
  const Vec& lam = es.eigenvalues();  // ascending
  const double lmin = lam(0);
  if (!(lmin > 1e6 * err) || !(std::sqrt(lmin - err) > 2.0 * tau)) return Vec();
  Vec sv(c);
  for (Eigen::Index i = 0; i < c; ++i) sv(i) = std::sqrt(lam(c - 1 - i));  // descending, as an SVD
  return sv;
}

}  // namespace

int StructureSolver::injective_cut(int start) {
  for (const auto& [s, c] : cut_cache_)
    if (s == start) return c;
  const int end = static_cast<int>(m_.ops.size());
  int cut = trailing_cut(m_, start);
  if (cut < end) {
    const ColMat A = trailing_map(m_, start, cut);
    bool injective = false;
    if (A.rows() == A.cols()) {
      injective = Eigen::PartialPivLU<ColMat>(A).rcond() > 1e-10;
    } else if (A.rows() > A.cols()) {
      const ColMat G = A.transpose() * A;
      injective = Eigen::PartialPivLU<ColMat>(G).rcond() > 1e-14;
    }
    if (!injective) cut = end;
  }
  cut_cache_.push_back({start, cut});
  return cut;
}

Structure StructureSolver::solve(int param, const std::function<bool()>& cancelled) {
  const ModelParam& p = m_.params[param];
  const int n = static_cast<int>(p.value.size());
  const int start = p.op;
  const int cut = injective_cut(start);
  Structure out;
  out.size = n;
  out.cut = cut;

  UnionFind uf(n);
  std::map<int, Cluster> clusters;  // by union-find root
  double ref_sq = 0;
  std::vector<SparseCol> cols;
  std::vector<int> owner, rowpos, pos(n, -1);
  double tau = 0;
  for (int k = 0; k < opt_.max_samples; ++k) {
    const Trace& tr = pool_.get(k);
    const int N = static_cast<int>(tr.inputs[0].rows());

    // Reference scale: a random perturbation of the same tensor that differs per token (unit
    // norm per token, like a unit broadcast direction) is generically visible in the output.
    Rng rng(0x5eedULL + static_cast<std::uint64_t>(k), p.name);
    Seed ref{param, Mat(N, n)};
    for (int r = 0; r < N; ++r)
      for (int j = 0; j < n; ++j) ref.values(r, j) = rng.normal() / std::sqrt(double(n));
    const Mat dref = jvp(m_, tr, ref, 1, cut);
    ref_sq += dref.squaredNorm();
    const int w = static_cast<int>(dref.cols());
    const Eigen::Index rows = Eigen::Index(N) * w;

    // The Jacobian on this input, column a = output tangent of the broadcast direction e_a,
    // kept as its non-zero entries (a direction inside attention touches one head only).
    const long per_dir = std::max<long>(1, long(N) * std::max(w, n));
    const int chunk = static_cast<int>(std::max<long>(1, std::min<long>(n, opt_.chunk_elements / per_dir)));
    for (auto& cl : cols) {
      cl.rows.clear();
      cl.vals.clear();
    }
    cols.resize(n);
    bool all_broadcast = true;
    for (int a0 = 0; a0 < n; a0 += chunk) {
      if (cancelled && cancelled()) return out;
      const int c = std::min(chunk, n - a0);
      Seed s{param, Mat::Zero(c, n), true};  // unit directions, the same for every token
      for (int a = 0; a < c; ++a) s.values(a, a0 + a) = 1.0;
      bool bc = false;
      const Mat d = jvp(m_, tr, s, c, cut, &bc);
      all_broadcast = all_broadcast && bc;
      // A broadcast tangent is the column 1_N (x) v: the same rank and null space as v scaled by
      // sqrt(N), kept as w rows instead of N*w.
      const Eigen::Index len = bc ? w : rows;
      const double sc_factor = bc ? std::sqrt(double(N)) : 1.0;
      for (int a = 0; a < c; ++a) {
        const double* v = d.data() + Eigen::Index(a) * len;
        SparseCol& sc = cols[a0 + a];
        sc.rows.reserve(static_cast<size_t>(len));
        sc.vals.reserve(static_cast<size_t>(len));
        for (Eigen::Index r = 0; r < len; ++r)
          if (v[r] != 0.0) {
            sc.rows.push_back(static_cast<int>(r));
            sc.vals.push_back(v[r] * sc_factor);
          }
      }
    }

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

    // A further input that leaves the clusters as they were usually only confirms the null
    // space found so far. Rows only raise singular values, so the rank can grow only along
    // that space: stacking this input's Jacobian J under R changes the small singular values
    // to those of [S_null; J V_null] (up to couplings of second order in the small terms),
    // an (d + rows) x d problem instead of the QR of all rows x all columns. When every one
    // stays <= tau (and every kept one stays > tau), the rank is unchanged and, if that ends
    // the loop, the stack is never factored. Otherwise this input takes the full path below.
    const double tau_now = opt_.tol_rel * std::sqrt(ref_sq);
    // Tried only where the rank did not just grow (the few-tokens trap gains rank input after
    // input: there the attempt would fail every time).
    const bool would_stop = k >= 1 && k + 1 >= opt_.min_samples && k >= opt_.patience &&
                            out.rank_history[k - 1] == out.rank_history[k - opt_.patience];
    const bool grew_last = k >= 2 && out.rank_history[k - 1] != out.rank_history[k - 2];
    if (would_stop && !grew_last && group_cols.size() == clusters.size()) {
      bool confirmed = true;
      int rank = 0;
      for (auto& [root, cl] : clusters) {
        if (group_cols.count(root) == 0 || group_cols[root].size() != cl.cols.size()) {
          confirmed = false;
          break;
        }
        Eigen::Index kept = 0;
        for (Eigen::Index i = 0; i < cl.sv.size(); ++i) {
          if (cl.sv(i) > tau && !(cl.sv(i) > tau_now)) confirmed = false;  // kept before, not now
          kept += cl.sv(i) > tau_now;
        }
        rank += static_cast<int>(kept);
        const Eigen::Index c = static_cast<Eigen::Index>(cl.cols.size());
        if (!confirmed) break;
        if (kept == c) continue;  // of full rank: more rows cannot lower it
        ColMat vn;
        Vec sn;
        null_space(cl, tau_now, vn, sn);
        const std::vector<int>& rws = group_rows[root];
        for (size_t i = 0; i < rws.size(); ++i) rowpos[rws[i]] = static_cast<int>(i);
        Mat J = Mat::Zero(static_cast<Eigen::Index>(rws.size()), c);  // row-major, as the JVPs
        for (Eigen::Index j = 0; j < c; ++j) {
          const SparseCol& sc = cols[cl.cols[j]];
          for (size_t e = 0; e < sc.rows.size(); ++e) J(rowpos[sc.rows[e]], j) = sc.vals[e];
        }
        ColMat S(vn.cols() + J.rows(), vn.cols());
        S.topRows(vn.cols()) = sn.asDiagonal();
        if (kept == 0) S.bottomRows(J.rows()) = J;  // the null space is everything: V = I
        else S.bottomRows(J.rows()) = J * Mat(vn);
        // A column longer than tau already means a singular value above it: no SVD needed.
        if (S.colwise().norm().maxCoeff() > tau_now) {
          confirmed = false;
          break;
        }
        const Vec s_new = singular_values(S);
        if (s_new.size() > 0 && s_new(0) > tau_now) {
          confirmed = false;
          break;
        }
        cl.vnull = std::move(vn);
        cl.snull = s_new;
      }
      if (confirmed) {
        for (auto& [root, cl] : clusters) cl.confirmed = cl.vnull.cols() > 0;
        tau = tau_now;
        out.rank_history.push_back(rank);
        out.samples = k + 1;
        break;
      }
      for (auto& [root, cl] : clusters) {  // not confirmed: the full path recomputes everything
        cl.vnull.resize(0, 0);
        cl.snull.resize(0);
      }
    }

    std::map<int, Cluster> next;
    for (auto& [root, gcols] : group_cols) {
      for (size_t i = 0; i < gcols.size(); ++i) pos[gcols[i]] = static_cast<int>(i);
      std::vector<const Cluster*> olds;
      Eigen::Index old_rows = 0;
      for (const auto& [oroot, oc] : clusters)
        if (uf.find(oroot) == root) {
          olds.push_back(&oc);
          old_rows += oc.R.rows();
        }
      const std::vector<int>& rws = group_rows[root];
      const Eigen::Index ncol = static_cast<Eigen::Index>(gcols.size());
      ColMat M = ColMat::Zero(old_rows + static_cast<Eigen::Index>(rws.size()), ncol);
      Eigen::Index at = 0;
      for (const Cluster* oc : olds) {
        for (size_t j = 0; j < oc->cols.size(); ++j)
          M.block(at, pos[oc->cols[j]], oc->R.rows(), 1) = oc->R.col(static_cast<Eigen::Index>(j));
        at += oc->R.rows();
      }
      for (size_t i = 0; i < rws.size(); ++i) rowpos[rws[i]] = static_cast<int>(i);
      for (Eigen::Index j = 0; j < ncol; ++j) {
        const SparseCol& sc = cols[gcols[j]];
        for (size_t e = 0; e < sc.rows.size(); ++e) M(at + rowpos[sc.rows[e]], j) = sc.vals[e];
      }
      Cluster cl;
      cl.cols = gcols;
      cl.R = std::move(M);  // factored below, unless every cluster is certified of full rank
      next[root] = std::move(cl);
    }
    clusters = std::move(next);

    tau = opt_.tol_rel * std::sqrt(ref_sq);
    // Full rank everywhere is settled by the Gram matrices alone (and the loop ends); at the
    // first cluster that is not certified, every cluster is factored instead.
    bool all_full = true;
    for (auto& [root, cl] : clusters) {
      cl.sv = gram_singular_values(cl.R, tau);
      cl.full = cl.sv.size() > 0;
      if (!cl.full) {
        all_full = false;
        break;
      }
    }
    int rank = 0;
    for (auto& [root, cl] : clusters) {
      if (!all_full) {
        const ColMat& M = cl.R;
        const Eigen::Index ncol = M.cols();
        if (M.rows() == 0) {
          cl.R = ColMat(0, ncol);
        } else {
          Eigen::HouseholderQR<ColMat> qr(M);
          const Eigen::Index kr = std::min(M.rows(), ncol);
          cl.R = ColMat(qr.matrixQR().topRows(kr).triangularView<Eigen::Upper>());
        }
        cl.full = false;
        cl.sv = singular_values(cl.R);
      }
      for (Eigen::Index i = 0; i < cl.sv.size(); ++i) rank += cl.sv(i) > tau;
    }
    out.rank_history.push_back(rank);
    out.samples = k + 1;
    if (rank == n) break;
    // No op on the way depends on the tokens: the Jacobian is the same for every input.
    if (all_broadcast) {
      out.input_independent = true;
      break;
    }
    if (k + 1 >= opt_.min_samples && k >= opt_.patience &&
        out.rank_history[k] == out.rank_history[k - opt_.patience])
      break;
  }

  // Null space per cluster, embedded in the full coordinate space.
  out.reference = std::sqrt(ref_sq);
  out.clusters = static_cast<int>(clusters.size());
  std::vector<Vec> basis;
  double null_max = 0, kept_min = 0;
  for (const auto& [root, cl] : clusters) {
    const int c = static_cast<int>(cl.cols.size());
    const Vec& sv = cl.sv;
    // Kept values come from the factored stack; null ones from it too, or, when the last input
    // only confirmed the null space, from that confirmation.
    int kept = 0;
    for (Eigen::Index i = 0; i < sv.size(); ++i) {
      if (sv(i) > tau) {
        ++kept;
        kept_min = kept_min == 0 ? sv(i) : std::min(kept_min, sv(i));
      } else if (!cl.confirmed) {
        null_max = std::max(null_max, sv(i));
      }
    }
    if (cl.confirmed && cl.snull.size() > 0) null_max = std::max(null_max, cl.snull.maxCoeff());
    if (kept == c) continue;
    ColMat V;
    Vec unused;
    if (cl.confirmed) V = cl.vnull;
    else null_space(cl, tau, V, unused);
    for (Eigen::Index j = 0; j < V.cols(); ++j) {
      Vec v = Vec::Zero(n);
      for (int i = 0; i < c; ++i) v(cl.cols[i]) = V(i, j);
      basis.push_back(v);
    }
  }
  out.redundant_dim = static_cast<int>(basis.size());
  out.null_basis.resize(n, out.redundant_dim);
  for (int j = 0; j < out.redundant_dim; ++j) out.null_basis.col(j) = basis[j];
  out.null_max = out.reference > 0 ? null_max / out.reference : 0;
  out.kept_min = out.reference > 0 ? kept_min / out.reference : 0;
  return out;
}

}  // namespace biaslab
