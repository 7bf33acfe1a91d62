// Building networks from configs, and compiling them to op lists.
#include <cmath>

#include "core/cold.hpp"
#include "model/model.hpp"
#include "core/rng.hpp"

namespace biaslab {

const char* param_role_name(ParamRole r) {
  switch (r) {
    case ParamRole::weight: return "weight";
    case ParamRole::bias: return "bias";
    case ParamRole::gain: return "gain";
    case ParamRole::shift: return "shift";
    case ParamRole::buffer: return "buffer";
  }
  return "?";
}

Param* LayerNode::find(const std::string& local) {
  for (auto& p : params)
    if (p.local == local) return &p;
  return nullptr;
}
const Param* LayerNode::find(const std::string& local) const {
  return const_cast<LayerNode*>(this)->find(local);
}

int Model::find_param(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

// Distributions: projections as torch.nn.Linear's default init, U(-1/sqrt(in), 1/sqrt(in)) for
// weight and bias; norm gains U(0.5, 1.5) and shifts U(-0.5, 0.5) (random, not 1 and 0, so every
// fold is a real test); running mean U(-0.5, 0.5), running var U(0.5, 2).
enum class Init { fan_in, gain, shift, run_mean, run_var };

Mat draw(std::uint64_t seed, const std::string& name, int rows, int cols, Init init, int fan_in) {
  Rng rng(seed, name);
  Mat m(rows, cols);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      switch (init) {
        case Init::fan_in: m(i, j) = rng.uniform(-bound, bound); break;
        case Init::gain: m(i, j) = rng.uniform(0.5, 1.5); break;
        case Init::shift: m(i, j) = rng.uniform(-0.5, 0.5); break;
        case Init::run_mean: m(i, j) = rng.uniform(-0.5, 0.5); break;
        case Init::run_var: m(i, j) = rng.uniform(0.5, 2.0); break;
      }
    }
  return m;
}

int layer_out_width(const LayerConfig& c, int in) {
  if (c.type == LayerType::linear && c.out_features > 0) return c.out_features;
  return in;
}

BIASLAB_COLD void build_layers(const std::vector<LayerConfig>& cfgs, int width, std::uint64_t seed,
                  const std::string& prefix, std::vector<LayerNode>& out) {
  out.clear();
  for (size_t i = 0; i < cfgs.size(); ++i) {
    LayerNode node;
    node.cfg = cfgs[i];
    node.cfg.body.clear();
    node.in_width = width;
    node.out_width = layer_out_width(cfgs[i], width);
    const std::string layer = layer_name(prefix, i);
    node.params = declare_params(node.cfg, node.in_width, node.out_width, seed, layer);
    if (cfgs[i].type == LayerType::residual)
      build_layers(cfgs[i].body, width, seed, body_prefix(layer), node.body);
    width = node.out_width;
    out.push_back(std::move(node));
  }
}

BIASLAB_COLD int sync_layers(std::vector<LayerNode>& nodes, int width, std::vector<LayerConfig>& cfgs) {
  cfgs.clear();
  for (auto& node : nodes) {
    node.in_width = width;
    if (node.cfg.type == LayerType::linear) {
      const Param* w = node.find("weight");
      node.cfg.out_features = w ? static_cast<int>(w->value.rows()) : node.cfg.out_features;
    }
    node.out_width = layer_out_width(node.cfg, width);
    LayerConfig c = node.cfg;
    if (node.cfg.type == LayerType::residual) sync_layers(node.body, width, c.body);
    width = node.out_width;
    cfgs.push_back(std::move(c));
  }
  return width;
}

long count_layers(const std::vector<LayerNode>& nodes) {
  long n = 0;
  for (const auto& node : nodes) {
    for (const auto& p : node.params)
      if (p.role != ParamRole::buffer) n += p.value.size();
    n += count_layers(node.body);
  }
  return n;
}

}  // namespace

BIASLAB_COLD std::vector<Param> declare_params(const LayerConfig& c, int in, int out, std::uint64_t seed,
                                  const std::string& layer) {
  std::vector<Param> ps;
  auto add = [&](const std::string& local, ParamRole role, int rows, int cols, Init init,
                 int fan_in) {
    ps.push_back({local, role, draw(seed, param_name(layer, local), rows, cols, init, fan_in)});
  };
  switch (c.type) {
    case LayerType::linear:
      add("weight", ParamRole::weight, out, in, Init::fan_in, in);
      if (c.bias) add("bias", ParamRole::bias, out, 1, Init::fan_in, in);
      break;
    case LayerType::layernorm:
      if (c.elementwise_affine) {
        add("weight", ParamRole::gain, in, 1, Init::gain, in);
        if (c.bias) add("bias", ParamRole::shift, in, 1, Init::shift, in);
      }
      break;
    case LayerType::rmsnorm:
      if (c.elementwise_affine) add("weight", ParamRole::gain, in, 1, Init::gain, in);
      break;
    case LayerType::batchnorm:
      if (c.affine) {
        add("weight", ParamRole::gain, in, 1, Init::gain, in);
        add("bias", ParamRole::shift, in, 1, Init::shift, in);
      }
      // Running statistics exist in both modes (as in torch); eval mode uses them.
      add("running_mean", ParamRole::buffer, in, 1, Init::run_mean, in);
      add("running_var", ParamRole::buffer, in, 1, Init::run_var, in);
      break;
    case LayerType::groupnorm:
    case LayerType::instancenorm:
      if (c.affine) {
        add("weight", ParamRole::gain, in, 1, Init::gain, in);
        add("bias", ParamRole::shift, in, 1, Init::shift, in);
      }
      break;
    case LayerType::attention:
      for (const char* p : {"q", "k", "v", "o"}) {
        const std::string proj = std::string(p) + "_proj.";
        add(proj + "weight", ParamRole::weight, in, in, Init::fan_in, in);
        const bool on = (*p == 'q' && c.q_bias) || (*p == 'k' && c.k_bias) ||
                        (*p == 'v' && c.v_bias) || (*p == 'o' && c.o_bias);
        if (on) add(proj + "bias", ParamRole::bias, in, 1, Init::fan_in, in);
      }
      break;
    case LayerType::relu:
    case LayerType::gelu:
    case LayerType::softmax:
    case LayerType::residual:
      break;
  }
  return ps;
}

BIASLAB_COLD Network build_network(const ExperimentConfig& config) {
  Network net;
  net.config = config;
  build_layers(config.layers, config.shape.features, config.seed, kTopLayers, net.layers);
  return net;
}

void sync_network(Network& net) { sync_layers(net.layers, net.config.shape.features, net.config.layers); }

long count_parameters(const Network& net) { return count_layers(net.layers); }

namespace {

struct Compiler {
  Model& m;

  int add_param(const LayerNode& node, const std::string& layer, const std::string& local,
                int op) {
    const Param* p = node.find(local);
    if (!p) return -1;
    m.params.push_back({param_name(layer, local), p->role, op, p->value});
    return static_cast<int>(m.params.size()) - 1;
  }

  void layers(const std::vector<LayerNode>& nodes, const std::string& prefix) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const LayerNode& node = nodes[i];
      const std::string name = layer_name(prefix, i);
      Op op;
      op.in = node.in_width;
      op.out = node.out_width;
      op.layer = name;
      op.layer_index = static_cast<int>(i);
      const int at = static_cast<int>(m.ops.size());
      const LayerConfig& c = node.cfg;
      switch (c.type) {
        case LayerType::linear:
          op.kind = OpKind::linear;
          op.w = add_param(node, name, "weight", at);
          op.b = add_param(node, name, "bias", at);
          m.ops.push_back(op);
          break;
        case LayerType::layernorm:
        case LayerType::rmsnorm:
        case LayerType::batchnorm:
        case LayerType::groupnorm:
        case LayerType::instancenorm:
          op.kind = OpKind::norm;
          op.eps = c.eps;
          op.groups = c.num_groups;
          op.norm = c.type == LayerType::layernorm      ? NormKind::layer
                    : c.type == LayerType::rmsnorm      ? NormKind::rms
                    : c.type == LayerType::groupnorm    ? NormKind::group
                    : c.type == LayerType::instancenorm ? NormKind::instance
                    : c.mode == BatchNormMode::train    ? NormKind::batch_train
                                                        : NormKind::batch_eval;
          op.gain = add_param(node, name, "weight", at);
          op.shift = add_param(node, name, "bias", at);
          op.mean = add_param(node, name, "running_mean", at);
          op.var = add_param(node, name, "running_var", at);
          m.ops.push_back(op);
          break;
        case LayerType::attention: {
          op.kind = OpKind::attention;
          op.heads = c.num_heads;
          op.causal = c.causal;
          op.rope = c.rope;
          op.wq = add_param(node, name, "q_proj.weight", at);
          op.bq = add_param(node, name, "q_proj.bias", at);
          op.wk = add_param(node, name, "k_proj.weight", at);
          op.bk = add_param(node, name, "k_proj.bias", at);
          op.wv = add_param(node, name, "v_proj.weight", at);
          op.bv = add_param(node, name, "v_proj.bias", at);
          m.ops.push_back(op);
          // The output projection is an ordinary linear op, so trailing-linear analysis and
          // folds treat it like any Linear.
          Op o;
          o.kind = OpKind::linear;
          o.in = o.out = node.in_width;
          o.layer = name;
          o.layer_index = static_cast<int>(i);
          o.w = add_param(node, name, "o_proj.weight", at + 1);
          o.b = add_param(node, name, "o_proj.bias", at + 1);
          m.ops.push_back(o);
          break;
        }
        case LayerType::relu:
        case LayerType::gelu:
          op.kind = OpKind::activation;
          op.act = c.type;
          op.approx = c.approximate;
          m.ops.push_back(op);
          break;
        case LayerType::softmax:
          op.kind = OpKind::softmax;
          m.ops.push_back(op);
          break;
        case LayerType::residual: {
          op.kind = OpKind::residual_begin;
          m.ops.push_back(op);
          layers(node.body, body_prefix(name));
          Op end = op;
          end.kind = OpKind::residual_end;
          end.partner = at;
          m.ops[at].partner = static_cast<int>(m.ops.size());
          m.ops.push_back(end);
          break;
        }
      }
    }
  }
};

}  // namespace

BIASLAB_COLD Model compile(const Network& net) {
  Model m;
  m.batch = net.config.shape.batch;
  m.tokens = net.config.shape.tokens;
  m.in_features = net.config.shape.features;
  m.out_features = net.layers.empty() ? m.in_features : net.layers.back().out_width;
  m.dtype = net.config.dtype;
  Compiler{m}.layers(net.layers, kTopLayers);
  return m;
}

double forward_flops(const Model& m) {
  const double N = double(m.batch) * m.tokens, T = m.tokens;
  double f = 0;
  for (const Op& op : m.ops) {
    if (op.kind == OpKind::linear) f += 2 * N * op.in * op.out;
    if (op.kind == OpKind::attention) f += 3 * 2 * N * op.in * op.in + 2 * 2 * N * T * op.in;
    if (op.kind == OpKind::norm || op.kind == OpKind::activation || op.kind == OpKind::softmax)
      f += 5 * N * op.in;
  }
  return f;
}

Mat draw_input(const ExperimentConfig& config, int stream) {
  const int n = config.shape.batch * config.shape.tokens;
  Rng rng(config.seed, "input." + std::to_string(stream));
  Mat x(n, config.shape.features);
  for (int i = 0; i < x.rows(); ++i)
    for (int j = 0; j < x.cols(); ++j) x(i, j) = rng.normal();
  return x;
}

}  // namespace biaslab
