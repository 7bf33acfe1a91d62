// The norm op family: forward and JVP. See norm.hpp.
#include "layers/norm.hpp"

#include "layers/layer.hpp"

namespace biaslab {

int norm_set(const Op& op, int r, int f, int T, int F) {
  switch (op.norm) {
    case NormKind::layer:
    case NormKind::rms: return r;
    case NormKind::batch_train:
    case NormKind::batch_eval: return f;
    case NormKind::instance: return (r / T) * F + f;
    case NormKind::group: return (r / T) * op.groups + f / (F / op.groups);
  }
  return 0;
}

int norm_set_count(const Op& op, int N, int F, int T) {
  switch (op.norm) {
    case NormKind::layer:
    case NormKind::rms: return N;
    case NormKind::batch_train:
    case NormKind::batch_eval: return F;
    case NormKind::instance: return (N / T) * F;
    case NormKind::group: return (N / T) * op.groups;
  }
  return 0;
}

const char* norm_set_words(const Op& op) {
  switch (op.norm) {
    case NormKind::layer:
    case NormKind::rms: return "per token";
    case NormKind::batch_train:
    case NormKind::batch_eval: return "per feature, across batch and tokens";
    case NormKind::instance: return "per sample and feature";
    case NormKind::group: return "per sample and group";
  }
  return "";
}

bool norm_centres(const Op& op) { return op.norm != NormKind::rms && op.norm != NormKind::batch_eval; }
bool norm_scales(const Op& op) { return op.norm != NormKind::batch_eval; }

namespace {

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

}  // namespace

template <class S>
MatT<S> norm_forward(const Op& op, const Weights<S>& w, Override<S> ov, const MatT<S>& x, int B) {
  const int N = static_cast<int>(x.rows()), F = static_cast<int>(x.cols());
  const int T = N / B;
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

template MatT<float> norm_forward<float>(const Op&, const Weights<float>&, Override<float>, const MatT<float>&, int);
template MatT<double> norm_forward<double>(const Op&, const Weights<double>&, Override<double>, const MatT<double>&, int);

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
    const bool centre = op.norm != NormKind::rms;
    const int S = norm_set_count(op, N, F, T);
    // Means relative to each set's first element, as in forward.cpp.
    Vec mean = Vec::Zero(S), var = Vec::Zero(S), cnt = Vec::Zero(S), first = Vec::Zero(S);
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = norm_set(op, r, f, T, F);
        if (cnt(s) == 0) first(s) = x(r, f);
        mean(s) += x(r, f) - first(s);
        cnt(s) += 1;
      }
    if (centre) mean = first + (mean.array() / cnt.array()).matrix();
    else mean.setZero();
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = norm_set(op, r, f, T, F);
        const double c = x(r, f) - mean(s);
        var(s) += c * c;
      }
    Vec rstd = ((var.array() / cnt.array()) + op.eps).rsqrt();
    Mat xh(N, F);
    for (int r = 0; r < N; ++r)
      for (int f = 0; f < F; ++f) {
        const int s = norm_set(op, r, f, T, F);
        xh(r, f) = (x(r, f) - mean(s)) * rstd(s);
      }
    Vec s1(S), s2(S);
    for (int a = 0; a < n; ++a) {
      auto d = dx.middleRows(static_cast<Eigen::Index>(a) * N, N);
      auto o = dy.middleRows(static_cast<Eigen::Index>(a) * N, N);
#ifndef __EMSCRIPTEN__
      // LayerNorm and RMSNorm, whose set is the token: each row's sums in two locals, without a
      // set lookup per element. The same sums in the same order as the loops below, so the same
      // numbers bit for bit. Natively only: the page's first-load engine counts its bytes.
      if (op.norm == NormKind::layer || op.norm == NormKind::rms) {
        for (int r = 0; r < N; ++r) {
          double t1 = 0, t2 = 0;
          for (int f = 0; f < F; ++f) {
            t1 += d(r, f);
            t2 += xh(r, f) * d(r, f);
          }
          t1 = centre ? t1 / cnt(r) : 0.0;
          t2 /= cnt(r);
          const double k = rstd(r);
          for (int f = 0; f < F; ++f) o(r, f) = k * (d(r, f) - t1 - xh(r, f) * t2);
        }
        continue;
      }
      // BatchNorm in training mode, whose set is the feature: the same sums, in the same order,
      // without a set lookup per element.
      if (op.norm == NormKind::batch_train) {
        s1.setZero();
        s2.setZero();
        for (int r = 0; r < N; ++r)
          for (int f = 0; f < F; ++f) {
            s1(f) += d(r, f);
            s2(f) += xh(r, f) * d(r, f);
          }
        s1.array() /= cnt.array();
        s2.array() /= cnt.array();
        for (int r = 0; r < N; ++r)
          for (int f = 0; f < F; ++f) o(r, f) = rstd(f) * (d(r, f) - s1(f) - xh(r, f) * s2(f));
        continue;
      }
#endif
      s1.setZero();
      s2.setZero();
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          const int s = norm_set(op, r, f, T, F);
          s1(s) += d(r, f);
          s2(s) += xh(r, f) * d(r, f);
        }
      s1.array() /= cnt.array();
      s2.array() /= cnt.array();
      if (!centre) s1.setZero();
      for (int r = 0; r < N; ++r)
        for (int f = 0; f < F; ++f) {
          const int s = norm_set(op, r, f, T, F);
          o(r, f) = rstd(s) * (d(r, f) - s1(s) - xh(r, f) * s2(s));
        }
    }
  }
  if (op.gain >= 0) dy.array().rowwise() *= m.params[op.gain].value.col(0).transpose().array();
  return dy;
}

double token_norm_factors(const Op& op, const Eigen::Ref<const Eigen::RowVectorXd>& x, Mat* U) {
  const Eigen::Index F = x.size();
  const bool centre = op.norm == NormKind::layer;
  // Mean relative to the first element, and the biased variance, as the forward and the JVP.
  const double mean = centre ? x(0) + (x.array() - x(0)).sum() / double(F) : 0.0;
  const double var = (x.array() - mean).square().sum() / double(F);
  const double denom = var + op.eps;
  const double r = denom > 0 ? 1.0 / std::sqrt(denom) : 0.0;
  const double sf = 1.0 / std::sqrt(double(F));
  U->resize(F, centre ? 2 : 1);
  if (centre) U->col(0).setConstant(sf);
  U->col(U->cols() - 1) = ((x.array() - mean) * (r * sf)).matrix().transpose();
  return r;
}

void norm_affine_params(std::vector<ParamSpec>& ps, int in, bool shift) {
  ps.push_back({"weight", ParamRole::gain, in, 1, Init::gain, in});
  if (shift) ps.push_back({"bias", ParamRole::shift, in, 1, Init::shift, in});
}

void compile_norm(CompileContext& ctx, NormKind kind) {
  Op op = ctx.op(OpKind::norm);
  const int at = ctx.next();
  op.norm = kind;
  op.eps = ctx.cfg().eps;
  op.groups = ctx.cfg().num_groups;
  op.gain = ctx.param("weight", at);
  op.shift = ctx.param("bias", at);
  op.mean = ctx.param("running_mean", at);
  op.var = ctx.param("running_var", at);
  ctx.emit(op);
}

}  // namespace biaslab
