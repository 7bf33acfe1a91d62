// Building networks from configs, and compiling them to op lists.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/cold.hpp"
#include "layers/layer.hpp"
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

// The distributions of Init (layers/layer.hpp).
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
  const LayerKind& k = layer_kind(c.type);
  return k.out_width ? k.out_width(c, in) : in;
}

BIASLAB_COLD void build_layers(const std::vector<LayerConfig>& cfgs, int width, const Shape& shape, std::uint64_t seed,
                  const std::string& prefix, std::vector<LayerNode>& out) {
  out.clear();
  for (size_t i = 0; i < cfgs.size(); ++i) {
    LayerNode node;
    node.cfg = cfgs[i];
    node.cfg.body.clear();
    node.cfg.branches.clear();
    node.cfg.positions = shape.tokens;
    node.cfg.context_features = shape.features;
    node.in_width = width;
    node.out_width = layer_out_width(cfgs[i], width);
    const std::string layer = layer_name(prefix, i);
    node.params = declare_params(node.cfg, node.in_width, node.out_width, seed, layer);
    if (layer_kind(cfgs[i].type).has_body)
      build_layers(cfgs[i].body, width, shape, seed, body_prefix(layer), node.body);
    node.branches.resize(cfgs[i].branches.size());
    for (size_t b = 0; b < cfgs[i].branches.size(); ++b)
      build_layers(cfgs[i].branches[b], width, shape, seed, branch_prefix(layer, b), node.branches[b]);
    width = node.out_width;
    out.push_back(std::move(node));
  }
}

BIASLAB_COLD int sync_layers(std::vector<LayerNode>& nodes, int width, std::vector<LayerConfig>& cfgs) {
  cfgs.clear();
  for (auto& node : nodes) {
    node.in_width = width;
    if (const auto sync = layer_kind(node.cfg.type).sync) sync(node);
    node.out_width = layer_out_width(node.cfg, width);
    LayerConfig c = node.cfg;
    if (layer_kind(node.cfg.type).has_body) sync_layers(node.body, width, c.body);
    c.branches.resize(node.branches.size());
    for (size_t b = 0; b < node.branches.size(); ++b) sync_layers(node.branches[b], width, c.branches[b]);
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
    for_each_sequence(node, "", [&](const std::vector<LayerNode>& seq, const std::string&, int) { n += count_layers(seq); });
  }
  return n;
}

}  // namespace

BIASLAB_COLD std::vector<Param> declare_params(const LayerConfig& c, int in, int out, std::uint64_t seed,
                                  const std::string& layer) {
  std::vector<ParamSpec> specs;
  if (const auto params = layer_kind(c.type).params) params(c, in, out, specs);
  std::vector<Param> ps;
  const auto shape = layer_kind(c.type).torch_shape;
  for (const ParamSpec& p : specs) {
    ps.push_back({p.local, p.role, draw(seed, param_name(layer, p.local), p.rows, p.cols, p.init, p.fan_in), {}});
    if (shape) ps.back().dims = shape(c, in, out, p.local);
  }
  return ps;
}

namespace {
BIASLAB_COLD void round_params(std::vector<LayerNode>& nodes) {
  for (LayerNode& node : nodes) {
    for (Param& p : node.params) round_to_float(p.value);
    round_params(node.body);
    for (auto& branch : node.branches) round_params(branch);
  }
}
}  // namespace

BIASLAB_COLD Network build_network(const ExperimentConfig& config) {
  Network net;
  net.config = config;
  build_layers(config.layers, config.shape.features, config.shape, config.seed, kTopLayers, net.layers);
  // A float32 model's parameters are float32 numbers: its float32 run, its float64 reference
  // and the structure's Jacobians all see the same values (and the reference needs no copy).
  if (config.dtype == DType::float32) round_params(net.layers);
  return net;
}

// Plain loops, compiled for size and called, not inlined: the page's first-load engine counts its
// bytes, and a model's parameters are rounded once.
[[gnu::noinline]] BIASLAB_COLD void round_to_float(Mat& v) {
  double* d = v.data();
  for (Eigen::Index i = 0; i < v.size(); ++i) d[i] = double(float(d[i]));
}

[[gnu::noinline]] BIASLAB_COLD bool holds_floats(const Mat& v) {
  const double* d = v.data();
  for (Eigen::Index i = 0; i < v.size(); ++i)
    if (double(float(d[i])) != d[i]) return false;
  return true;
}

void sync_network(Network& net) { sync_layers(net.layers, net.config.shape.features, net.config.layers); }

long count_parameters(const Network& net) { return count_layers(net.layers); }

namespace {

void compile_layers(Model& m, const std::vector<LayerNode>& nodes, const std::string& prefix) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    CompileContext ctx(m, nodes[i], layer_name(prefix, i), static_cast<int>(i), compile_layers);
    layer_kind(nodes[i].cfg.type).compile(ctx);
  }
}

}  // namespace

BIASLAB_COLD Model compile(const Network& net, bool values) {
  Model m;
  m.copy_values = values;
  m.batch = net.config.shape.batch;
  m.tokens = net.config.shape.tokens;
  if (!net.config.shape.grid.empty()) {
    m.grid_h = net.config.shape.grid[0];
    m.grid_w = net.config.shape.grid[1];
  }
  m.in_features = net.config.shape.features;
  m.out_features = net.layers.empty() ? m.in_features : net.layers.back().out_width;
  m.dtype = net.config.dtype;
  compile_layers(m, net.layers, kTopLayers);
  for (const Op& op : m.ops) m.context_tokens = std::max(m.context_tokens, op.context);
  m.copy_values = true;
  return m;
}

BIASLAB_COLD void lend_values(Model& m) {
  for (ModelParam& p : m.params) {
    p.value.swap(const_cast<Param*>(p.source)->value);
    // (A second model parameter from one source, which no kind compiles today, would find it
    // emptied by the first: refused, as the value would be lost on its return.)
    if (p.value.size() == 0) throw std::logic_error("lend_values: a parameter lent twice");
  }
}

BIASLAB_COLD void return_values(Model& m) {
  for (ModelParam& p : m.params) p.value.swap(const_cast<Param*>(p.source)->value);  // (lent: it was empty)
}

double forward_flops(const Model& m, int from_op) {
  const double N = double(m.batch) * m.tokens, T = m.tokens;
  double f = 0;
  for (size_t i = static_cast<size_t>(std::max(0, from_op)); i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    if (op.kind == OpKind::linear) f += 2 * N * op.in * op.out;
    if (op.kind == OpKind::conv) f += 2 * N * op.in / op.groups * op.out * op.kernel_h * op.kernel_w;
    if (op.kind == OpKind::attention) {  // q, then k and v (kv_heads / heads as wide), then scores and context
      const double keys = op.context ? op.context : T, kv = double(op.kv_heads) * op.in / op.heads;
      const double source = op.context ? m.in_features : op.in;  // what k and v read
      f += 2 * N * op.in * op.in + 2 * 2 * m.batch * keys * source * kv + 2 * 2 * N * keys * op.in;
    }
    if (op.kind == OpKind::glu) f += 2 * 2 * N * op.in * op.out + 10 * N * op.out;  // gate, up; act and product
    if (op.kind == OpKind::norm || op.kind == OpKind::activation || op.kind == OpKind::softmax)
      f += 5 * N * op.in;
  }
  return f;
}

int context_tokens(const std::vector<LayerConfig>& layers) {
  for (const LayerConfig& l : layers) {
    if (l.context_tokens > 0) return l.context_tokens;
    int t = context_tokens(l.body);
    for (const auto& b : l.branches) t = t ? t : context_tokens(b);
    if (t) return t;
  }
  return 0;
}

Mat draw_input(const ExperimentConfig& config, int stream) {
  const int n = config.shape.batch * config.shape.tokens;
  const int nc = config.shape.batch * context_tokens(config.layers);
  Mat x(n + nc, config.shape.features);
  Rng rng(config.seed, "input." + std::to_string(stream));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < x.cols(); ++j) x(i, j) = rng.normal();
  Rng ctx(config.seed, "context." + std::to_string(stream));
  for (int i = n; i < n + nc; ++i)
    for (int j = 0; j < x.cols(); ++j) x(i, j) = ctx.normal();
  return x;
}

}  // namespace biaslab
