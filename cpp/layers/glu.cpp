// glu: the gated feed-forward block of Llama, Qwen, Mistral (SwiGLU) and Gemma (GeGLU),
//   y = down_proj(act(gate_proj(x)) * up_proj(x)),
// with Hugging Face LlamaMLP's parameter names and one `bias` flag for all three projections
// (its mlp_bias). The layer kind, and the gated op's forward and JVP side by side.
#include "layers/glu.hpp"

#include <optional>

#include "layers/layer.hpp"

namespace biaslab {

using jvp_detail::Tangent;

template <class S>
MatT<S> glu_forward(const Op& op, const Weights<S>& w, Override<S> ov, const MatT<S>& x,
                    const std::vector<MatT<S>>* pre, std::vector<MatT<S>>* products) {
  if (products) products->assign(2, MatT<S>());
  auto opt = [&](int i) { return i >= 0 ? &param(w, ov, i) : nullptr; };
  const MatT<S> g = linear<S>(x, param(w, ov, op.wg), opt(op.bg), pre ? &(*pre)[0] : nullptr,
                              products ? &(*products)[0] : nullptr);
  const MatT<S> u = linear<S>(x, param(w, ov, op.wu), opt(op.bu), pre ? &(*pre)[1] : nullptr,
                              products ? &(*products)[1] : nullptr);
  return activate<S>(*op.act, g).cwiseProduct(u);
}

template MatT<float> glu_forward<float>(const Op&, const Weights<float>&, Override<float>, const MatT<float>&,
                                        const std::vector<MatT<float>>*, std::vector<MatT<float>>*);
template MatT<double> glu_forward<double>(const Op&, const Weights<double>&, Override<double>, const MatT<double>&,
                                          const std::vector<MatT<double>>*, std::vector<MatT<double>>*);

// With g = x W_g^T + b_g and u = x W_u^T + b_u, per direction:
//   dy = act'(g) * dg * u + act(g) * du,  dg = dx W_g^T (+ the gate seed), du = dx W_u^T (+ the up seed).
namespace {

// act(g) and act'(g) * u at each token: the factors of du and dg in the tangent.
void glu_factors(const Model& m, const Op& op, const Mat& x, Mat& gate, Mat& slope) {
  auto pre_act = [&](int wi, int bi) {
    Mat z = x * m.params[wi].value.transpose();
    if (bi >= 0) z.rowwise() += m.params[bi].value.col(0).transpose();
    return z;
  };
  const Mat g = pre_act(op.wg, op.bg), u = pre_act(op.wu, op.bu);
  gate = op.act->f64(g);
  slope = op.act->derivative(g).cwiseProduct(u);
}

}  // namespace

Mat glu_jvp(const Model& m, const Op& op, const Mat& x, const Tangent* dx, const Seed& seed, int n) {
  const Eigen::Index N = x.rows();
  Mat gate, slope;
  glu_factors(m, op, x, gate, slope);
  // The tangent of one projection, dense (n*N, hidden), or empty when exactly zero.
  auto project = [&](int wi, int bi) -> Mat {
    std::optional<Tangent> t;
    if (dx) t = Tangent{dx->v * m.params[wi].value.transpose(), dx->broadcast};
    if (bi >= 0 && bi == seed.param) {
      const Tangent s{seed.values, seed.broadcast};
      t = t ? jvp_detail::add(*t, s, N) : s;
    }
    return t ? t->dense(N) : Mat();
  };
  const Mat dg = project(op.wg, op.bg), du = project(op.wu, op.bu);
  Mat out = Mat::Zero(Eigen::Index(n) * N, gate.cols());
  for (int a = 0; a < n; ++a) {
    auto o = out.middleRows(Eigen::Index(a) * N, N);
    if (dg.size()) o.array() += slope.array() * dg.middleRows(Eigen::Index(a) * N, N).array();
    if (du.size()) o.array() += gate.array() * du.middleRows(Eigen::Index(a) * N, N).array();
  }
  return out;
}

// Token t's tangent rows are dx_t M_t^T with M_t = diag(slope_t) W_g + diag(gate_t) W_u: one
// product with the token's own matrix instead of one with each weight, made a block of hidden
// units at a time (a few MB), which pays where a token has many directions.
Mat glu_jvp_per_token(const Model& m, const Op& op, const Mat& x, const Mat& dx, int n) {
  const Eigen::Index N = x.rows(), F = x.cols(), H = op.out;
  constexpr Eigen::Index kBlock = 128;
  Mat gate, slope;
  glu_factors(m, op, x, gate, slope);
  const Mat& Wg = m.params[op.wg].value;
  const Mat& Wu = m.params[op.wu].value;
  Mat out(Eigen::Index(n) * N, H);
  Mat M(std::min(kBlock, H), F);
  using Stride = Eigen::OuterStride<>;
  for (Eigen::Index t = 0; t < N; ++t) {
    const Eigen::Map<const Mat, 0, Stride> X(dx.data() + t * F, n, F, Stride(N * F));  // rows a * N + t
    Eigen::Map<Mat, 0, Stride> Y(out.data() + t * H, n, H, Stride(N * H));
    for (Eigen::Index j0 = 0; j0 < H; j0 += kBlock) {
      const Eigen::Index hb = std::min(kBlock, H - j0);
      for (Eigen::Index j = 0; j < hb; ++j)
        M.row(j) = slope(t, j0 + j) * Wg.row(j0 + j) + gate(t, j0 + j) * Wu.row(j0 + j);
      Y.middleCols(j0, hb).noalias() = X * M.topRows(hb).transpose();
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The layer kind
// ---------------------------------------------------------------------------------------------

namespace kinds {
namespace {

constexpr const char* kActivations[] = {"silu", "gelu", "gelu_tanh", nullptr};
constexpr LayerOption kOptions[] = {
    {integer("hidden", 0, 1, Limits::max_features, "features",
             "Width of the gate and up projections (Hugging Face's intermediate_size); omit it for 4 x "
             "the input width.",
             "4 x the input width"),
     &LayerConfig::hidden},
    {choice("activation", kActivations, 0,
            "The gate's activation: silu makes SwiGLU (Llama, Qwen, Mistral), gelu GeGLU with the "
            "exact GELU, gelu_tanh GeGLU with the tanh approximation (Gemma)."),
     &LayerConfig::activation},
    {flag("bias", false, "Adds a bias to gate_proj, up_proj and down_proj (Hugging Face's mlp_bias)."),
     &LayerConfig::bias},
};

int hidden(const LayerConfig& c, int in) { return c.hidden > 0 ? c.hidden : 4 * in; }

std::optional<Error> check(const LayerConfig& c, int in, const std::string& path) {
  if (hidden(c, in) > Limits::max_features)
    return Error{path + ".hidden", "the default hidden width 4 x " + std::to_string(in) + " exceeds the limit of " +
                                       std::to_string(Limits::max_features) + " features; set hidden"};
  return std::nullopt;
}

// gate_proj and up_proj (hidden, F), down_proj (F, hidden), as torch.nn.Linear.
void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  const int h = hidden(c, in);
  for (const char* name : {"gate_proj.", "up_proj."}) {
    ps.push_back({std::string(name) + "weight", ParamRole::weight, h, in, Init::fan_in, in});
    if (c.bias) ps.push_back({std::string(name) + "bias", ParamRole::bias, h, 1, Init::fan_in, in});
  }
  ps.push_back({"down_proj.weight", ParamRole::weight, in, h, Init::fan_in, h});
  if (c.bias) ps.push_back({"down_proj.bias", ParamRole::bias, in, 1, Init::fan_in, h});
}

const Activation& activation_of(const LayerConfig& c) {
  switch (c.activation) {
    case GluActivation::gelu: return gelu_activation(false);
    case GluActivation::gelu_tanh: return gelu_activation(true);
    case GluActivation::silu: break;
  }
  return silu_activation();
}

void compile(CompileContext& ctx) {
  Op op = ctx.op(OpKind::glu);
  const int at = ctx.next();
  op.out = hidden(ctx.cfg(), op.in);
  op.act = &activation_of(ctx.cfg());
  op.wg = ctx.param("gate_proj.weight", at);
  op.bg = ctx.param("gate_proj.bias", at);
  op.wu = ctx.param("up_proj.weight", at);
  op.bu = ctx.param("up_proj.bias", at);
  ctx.emit(op);
  Op down = ctx.op(OpKind::linear);
  down.in = op.out;
  down.w = ctx.param("down_proj.weight", at + 1);
  down.b = ctx.param("down_proj.bias", at + 1);
  ctx.emit(down);
}

std::string explain(const Op&, int k) {
  return k > 0 ? "feeds the gate and up projections of a gated FFN: it is lost only where both weights are blind to it"
               : "feeds the gate and up projections of a gated FFN, through its activation and product";
}

// The gate and up biases enter inside the layer.
std::string explain_own(const Op& op, const std::string& local, int k, int n) {
  const std::string lost = k > 0 ? "; " + std::to_string(k) + " of its " + std::to_string(n) + " directions are lost after it" : "";
  if (local == "gate_proj.bias")
    return std::string("shifts the gate's ") + op.act->name + " input: the change is multiplied by each token's up projection" + lost;
  if (local == "up_proj.bias")
    return std::string("adds ") + op.act->name + "(gate) * b_up, which varies with each token's gate" + lost;
  return "";  // down_proj.bias: after the layer, like any Linear's
}

constexpr Projection kReads[] = {{"gate_proj.", &LayerConfig::bias}, {"up_proj.", &LayerConfig::bias}};
constexpr Projection kWrites{"down_proj.", &LayerConfig::bias};
constexpr FoldTraits kFolds{kReads, &kWrites};

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("glu");
  const LayerConfig& c = n.cfg;
  const char* act = c.activation == GluActivation::gelu ? "gelu" : c.activation == GluActivation::gelu_tanh ? "gelu_tanh" : "silu";
  return "GLU(" + std::to_string(n.in_width) + ", " + std::to_string(hidden(c, n.in_width)) + ", activation=\"" +
         act + "\", bias=" + py_bool(c.bias) + ")";
}

}  // namespace

extern const LayerKind glu{LayerType::glu, "glu",
                           "Gated feed-forward down_proj(act(gate_proj(x)) * up_proj(x)) (SwiGLU, GeGLU; Hugging "
                           "Face LlamaMLP).",
                           kOptions, check, nullptr, params, compile, explain,
                           /*has_body=*/false, nullptr, &kFolds, explain_own, hidden, "hidden"};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter glu_torch = torch;

}  // namespace kinds

}  // namespace biaslab
