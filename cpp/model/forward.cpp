// The forward driver: runs a model's ops in order, keeping residual skips. Each op family's
// math lives with the layer kinds that use it (cpp/layers).
#include "model/forward.hpp"

#include "layers/conv.hpp"
#include "layers/glu.hpp"
#include "layers/norm.hpp"

#include <algorithm>
#include <cmath>

namespace biaslab {

template <class S>
MatT<S> op_forward(const Model& m, const Op& op, const Weights<S>& w, const MatT<S>& x,
                   Override<S> ov, AttentionCache* cache, const std::vector<MatT<S>>* pre,
                   std::vector<MatT<S>>* products, const MatT<S>* context, int batch) {
  const int B = batch > 0 ? batch : m.batch;
  switch (op.kind) {
    case OpKind::linear:
      if (products) products->assign(1, MatT<S>());
      return linear<S>(x, param(w, ov, op.w), op.b >= 0 ? &param(w, ov, op.b) : nullptr,
                       pre ? &(*pre)[0] : nullptr, products ? &(*products)[0] : nullptr);
    case OpKind::conv:
      if (products) products->assign(1, MatT<S>());
      return conv_forward<S>(op, param(w, ov, op.w), op.b >= 0 ? &param(w, ov, op.b) : nullptr, x,
                             pre ? &(*pre)[0] : nullptr, products ? &(*products)[0] : nullptr);
    case OpKind::position:
      return add_positions<S>(x, param(w, ov, op.b), m.tokens);
    case OpKind::norm:
      return norm_forward<S>(op, w, ov, x, B);
    case OpKind::activation:
      return activate<S>(*op.act, x);
    case OpKind::softmax:
      return softmax_forward<S>(x);
    case OpKind::attention:
      return attention_core<S>(m, op, w, x, op.context > 0 ? *context : x, B, cache, ov, pre, products);
    case OpKind::glu:
      return glu_forward<S>(op, w, ov, x, pre, products);
    case OpKind::residual_begin:
    case OpKind::residual_end:
    case OpKind::branch_next:
      return x;
  }
  return x;
}

namespace {

// An open residual or parallel block: its input and, for a parallel block, the input plus the
// outputs of the branches it has finished (a residual adds its input alone: no copy of it).
template <class S>
struct Skip {
  MatT<S> input, sum;
  bool parallel = false;
};

// Runs ops [start, end) on h with the open blocks `skips`.
template <class S>
MatT<S> run_ops(const Model& m, const Weights<S>& w, MatT<S> h, const MatT<S>& context, std::vector<Skip<S>> skips,
                int start, Override<S> ov, Trace* trace, Recording<S>* record,
                const std::vector<MatT<S>>* start_products = nullptr, int batch = 0) {
  for (size_t i = start; i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    if (trace) trace->inputs[i] = h.template cast<double>();
    if (record) record->inputs[i] = h;
    switch (op.kind) {
      case OpKind::residual_begin:
        skips.push_back(op.parallel ? Skip<S>{h, h, true} : Skip<S>{h, {}, false});
        break;
      case OpKind::branch_next:
        skips.back().sum += h;
        h = skips.back().input;
        break;
      case OpKind::residual_end:
        h += skips.back().parallel ? skips.back().sum : skips.back().input;
        skips.pop_back();
        break;
      default:
        h = op_forward<S>(m, op, w, h, ov, trace ? &trace->attention[i] : nullptr,
                          static_cast<int>(i) == start ? start_products : nullptr,
                          record ? &record->products[i] : nullptr, &context, batch);
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
  const MatT<S> context = context_rows(m, x);  // no rows without cross-attention
  if (trace) trace->context = context.template cast<double>();
  MatT<S> y = run_ops<S>(m, w, input_rows(m, x), context, {}, 0, ov, trace, nullptr);
  if (trace) trace->output = y.template cast<double>();
  return y;
}

template <class S>
MatT<S> forward_recording(const Model& m, const Weights<S>& w, const MatT<S>& x, Recording<S>& rec) {
  rec.inputs.assign(m.ops.size() + 1, MatT<S>());
  rec.products.assign(m.ops.size(), {});
  rec.context = context_rows(m, x);
  MatT<S> y = run_ops<S>(m, w, input_rows(m, x), rec.context, {}, 0, {}, nullptr, &rec);
  rec.inputs.back() = y;
  return y;
}

namespace {

// The blocks still open at `start`: begins before it whose end is not, with the outputs of
// their branches that finished before it (the input of each branch_next).
template <class S>
std::vector<Skip<S>> open_blocks(const Model& m, const Recording<S>& rec, int start) {
  std::vector<Skip<S>> skips;
  for (int i = 0; i < start; ++i) {
    const Op& o = m.ops[i];
    if (o.kind == OpKind::residual_begin && o.partner >= start)
      skips.push_back(o.parallel ? Skip<S>{rec.inputs[i], rec.inputs[i], true} : Skip<S>{rec.inputs[i], {}, false});
    if (o.kind == OpKind::branch_next && o.partner >= start) skips.back().sum += rec.inputs[i];
  }
  return skips;
}

// The start op's products before biases, which still hold unless a weight of it is replaced.
template <class S>
const std::vector<MatT<S>>* start_products(const Model& m, const Recording<S>& rec, int start, int replaced) {
  const Op& op = m.ops[start];
  const bool weight_replaced = replaced >= 0 && (replaced == op.w || replaced == op.wq || replaced == op.wk ||
                                                 replaced == op.wv || replaced == op.wg || replaced == op.wu);
  return !weight_replaced && !rec.products[start].empty() ? &rec.products[start] : nullptr;
}

// x's rows, k times over.
template <class S>
MatT<S> repeat_rows(const MatT<S>& x, int k) {
  MatT<S> y(x.rows() * k, x.cols());
  for (int i = 0; i < k; ++i) y.middleRows(i * x.rows(), x.rows()) = x;
  return y;
}

}  // namespace

template <class S>
MatT<S> forward_from(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                     Override<S> ov) {
  return run_ops<S>(m, w, rec.inputs[start], rec.context, open_blocks(m, rec, start), start, ov, nullptr, nullptr,
                    start_products(m, rec, start, ov.index));
}

template <class S>
std::vector<MatT<S>> forward_from_stacked(const Model& m, const Weights<S>& w, const Recording<S>& rec, int start,
                                          int param, const std::vector<const MatT<S>*>& values) {
  const int K = static_cast<int>(values.size());
  for (size_t i = static_cast<size_t>(start) + 1; i < m.ops.size(); ++i) {
    const Op& o = m.ops[i];
    if (o.kind == OpKind::norm && o.norm == NormKind::batch_train) return {};
    for (int p : {o.w, o.b, o.gain, o.shift, o.mean, o.var, o.wq, o.bq, o.wk, o.bk, o.wv, o.bv, o.sinks, o.qn_gain,
                  o.qn_shift, o.kn_gain, o.kn_shift, o.wg, o.bg, o.wu, o.bu})
      if (p == param) return {};
  }
  const Op& op = m.ops[static_cast<size_t>(start)];
  const std::vector<MatT<S>>* pre = start_products(m, rec, start, param);
  const MatT<S>& x = rec.inputs[static_cast<size_t>(start)];
  MatT<S> h;
  for (int k = 0; k < K; ++k) {
    const MatT<S> y = op_forward<S>(m, op, w, x, Override<S>{param, values[static_cast<size_t>(k)]}, nullptr, pre,
                                    nullptr, &rec.context);
    if (k == 0) h.resize(y.rows() * K, y.cols());
    h.middleRows(k * y.rows(), y.rows()) = y;
  }
  std::vector<Skip<S>> skips = open_blocks(m, rec, start);
  for (Skip<S>& s : skips) {
    s.input = repeat_rows(s.input, K);
    if (s.parallel) s.sum = repeat_rows(s.sum, K);
  }
  const MatT<S> y = run_ops<S>(m, w, std::move(h), repeat_rows(rec.context, K), std::move(skips), start + 1, {},
                               nullptr, nullptr, nullptr, K * m.batch);
  std::vector<MatT<S>> out(static_cast<size_t>(K));
  const Eigen::Index n = y.rows() / K;
  for (int k = 0; k < K; ++k) out[static_cast<size_t>(k)] = y.middleRows(k * n, n);
  return out;
}

#define BIASLAB_INSTANTIATE(S)                                                                 \
  template MatT<S> forward<S>(const Model&, const Weights<S>&, const MatT<S>&, Override<S>,     \
                              Trace*);                                                          \
  template MatT<S> forward_recording<S>(const Model&, const Weights<S>&, const MatT<S>&,        \
                                        Recording<S>&);                                         \
  template MatT<S> forward_from<S>(const Model&, const Weights<S>&, const Recording<S>&, int,    \
                                   Override<S>);                                                \
  template std::vector<MatT<S>> forward_from_stacked<S>(const Model&, const Weights<S>&,       \
                                                        const Recording<S>&, int, int,          \
                                                        const std::vector<const MatT<S>*>&);    \
  template MatT<S> op_forward<S>(const Model&, const Op&, const Weights<S>&, const MatT<S>&,    \
                                 Override<S>, AttentionCache*, const std::vector<MatT<S>>*,     \
                                 std::vector<MatT<S>>*, const MatT<S>*, int);                   \

BIASLAB_INSTANTIATE(float)
BIASLAB_INSTANTIATE(double)
#undef BIASLAB_INSTANTIATE

}  // namespace biaslab
