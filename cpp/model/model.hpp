// Networks and models.
//
// Shape letters used throughout: B = batch, T = tokens, F = features (width), H = heads,
// d = head dimension (F / H), N = B*T rows. Activations are row-major (N, F) matrices whose row
// b*T + t holds token t of sample b.
//
// A Network is the config's layer tree with parameter values attached: folds rewrite it and it
// prints back to a config. A Model is a Network compiled into a flat list of ops (residual blocks
// become begin/end markers) that forward and JVP passes loop over. Parameters are declared once,
// per layer type, in declare_params(); every name and every analysis goes through that list.
#pragma once

#include <string>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "model/config.hpp"

namespace biaslab {

template <class S>
using MatT = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Mat = MatT<double>;
using Vec = Eigen::VectorXd;

// weight: a projection matrix; bias: added after a projection; gain / shift: a norm's affine
// weight / bias; buffer: running statistics (not trained).
enum class ParamRole { weight, bias, gain, shift, buffer };
const char* param_role_name(ParamRole r);
inline bool is_bias_like(ParamRole r) { return r == ParamRole::bias || r == ParamRole::shift; }

// A tensor's torch shape of up to four dimensions; rank 0: not given. Plain values (no
// allocation), as every parameter carries one.
struct TorchShape {
  int rank = 0;
  std::int64_t size[4] = {0, 0, 0, 0};
  std::vector<std::int64_t> list() const { return {size, size + rank}; }
};

// Parameter values are float64; a float32 model is the same values rounded. Matrices are
// (out, in) like torch's Linear.weight; vectors are (n, 1).
struct Param {
  std::string local;  // e.g. "k_proj.bias", "weight", "running_var"
  ParamRole role;
  Mat value;
  // The torch shape when it is not (rows, cols) for a weight or (rows) otherwise: a convolution's
  // weight (out, in / groups, k[, k]) is held as (out, in / groups * k[* k]) in that order.
  TorchShape dims;
};

struct LayerNode {
  LayerConfig cfg;  // cfg.body and cfg.branches are unused: see body and branches
  std::vector<Param> params;
  std::vector<LayerNode> body;                   // residual
  std::vector<std::vector<LayerNode>> branches;  // parallel
  int in_width = 0, out_width = 0;

  Param* find(const std::string& local);
  const Param* find(const std::string& local) const;
};

struct Network {
  ExperimentConfig config;  // seed, dtype, shape; config.layers mirrors `layers` after sync
  std::vector<LayerNode> layers;
};

// Dotted names, as in a PyTorch state dict, made only by these functions: a top-level layer is
// "layers.<i>", a layer of a residual body "<block>.body.<j>", a layer of a parallel's branch
// "<block>.branches.<b>.<j>", a parameter "<layer>.<local>".
// State-dict keys, safetensors keys, fold moves, report rows and the random streams of the
// initial values all use them.
inline constexpr const char* kTopLayers = "layers.";
inline std::string layer_name(const std::string& seq_prefix, size_t i) { return seq_prefix + std::to_string(i); }
inline std::string body_prefix(const std::string& layer) { return layer + ".body."; }
inline std::string branch_prefix(const std::string& layer, size_t b) {
  return layer + ".branches." + std::to_string(b) + ".";
}

// The layer sequences a node (LayerNode or LayerConfig) holds, in order: a residual's body, then
// a parallel's branches. f(sequence, name prefix of its layers, branch index or -1 for a body).
template <class Node, class F>
void for_each_sequence(Node& node, const std::string& layer, F&& f) {
  if (!node.body.empty()) f(node.body, body_prefix(layer), -1);
  for (size_t b = 0; b < node.branches.size(); ++b) f(node.branches[b], branch_prefix(layer, b), static_cast<int>(b));
}
// The sequence for_each_sequence names with `branch`.
template <class Node>
auto& sequence_of(Node& node, int branch) {
  return branch < 0 ? node.body : node.branches[static_cast<size_t>(branch)];
}
inline std::string param_name(const std::string& layer, const std::string& local) { return layer + "." + local; }

// Every parameter and buffer of a layer tree with its dotted name, in declaration order (the
// order of Model::params): f(name, param).
template <class Nodes, class F>
void visit_params(Nodes& nodes, F&& f, const std::string& seq_prefix = kTopLayers) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string layer = layer_name(seq_prefix, i);
    for (auto& p : nodes[i].params) f(param_name(layer, p.local), p);
    for_each_sequence(nodes[i], layer, [&](auto& seq, const std::string& prefix, int) { visit_params(seq, f, prefix); });
  }
}

// Draws every parameter from the seed (one stream per dotted name); a float32 config's are
// rounded to float32 numbers.
Network build_network(const ExperimentConfig& config);
// Rounds every entry to the nearest float32 number; whether every entry is one.
void round_to_float(Mat& v);
bool holds_floats(const Mat& v);
// Rebuilds config.layers from the tree (after a fold changed it) and recomputes widths.
void sync_network(Network& net);
long count_parameters(const Network& net);  // trainable ones: buffers excluded

// The parameters a layer kind declares (its params() in cpp/layers), in order, with their
// initial values drawn from rng streams keyed by their dotted names (param_name(layer, local)).
std::vector<Param> declare_params(const LayerConfig& cfg, int in_width, int out_width,
                                  std::uint64_t seed, const std::string& layer);

// ---------------------------------------------------------------------------------------------
// Ops: the small vocabulary layer kinds compile to (cpp/layers/layer.hpp).
struct LayerKind;
struct Activation;
// residual_begin and residual_end enclose a residual's body or a parallel's branches; between two
// branches, branch_next adds the branch's output to the block's sum and restarts from its input.
enum class OpKind { linear, conv, position, norm, activation, softmax, attention, glu, residual_begin, residual_end, branch_next };
enum class NormKind { layer, rms, batch_train, batch_eval, group, instance };

struct Op {
  OpKind kind;
  const LayerKind* layer_kind = nullptr;  // the kind of the config layer that compiled it
  int in = 0, out = 0;        // widths
  std::string layer;          // dotted prefix of the config layer, e.g. "layers.0.body.1"
  int layer_index = -1;       // index of the config layer in its sequence
  // Indices into Model::params; -1 when absent.
  int w = -1, b = -1;                                    // linear (and attention's o_proj)
                                                         // position: b is the table
  NormKind norm = NormKind::layer;
  int gain = -1, shift = -1, mean = -1, var = -1;        // norm
  double eps = 0;
  int groups = 1;
  int wq = -1, bq = -1, wk = -1, bk = -1, wv = -1, bv = -1;  // attention core
  int sinks = -1;  // attention: the (heads, 1) sink logits, one per head in every softmax row
  // attention, qk_norm: q and k normalised per head over head_dim (Qwen3), after the projections
  // and before RoPE, with one gain and (layernorm) one shift shared by the heads.
  bool qk_norm = false;
  NormKind qk_norm_kind = NormKind::layer;  // layer or rms
  int qn_gain = -1, qn_shift = -1, kn_gain = -1, kn_shift = -1;
  int heads = 1;
  int kv_heads = 1;  // key/value heads; query head h reads kv head h / (heads / kv_heads)
  bool causal = false, rope = false;
  int context = 0;  // cross-attention: keys and values read the model's context, of this many tokens
  int keys = 0;     // the keys each query's softmax row spans: the tokens, or the context's
  int rotary_dim = 0;             // rope: the leading dimensions of each head that rotate (even)
  bool rope_interleaved = false;  // rope: pairs (2i, 2i+1) (GPT-J) instead of (i, i + r/2)
  double rope_base = 10000.0;     // rope: angle of pair i at position t is t * base^(-2i/r)
  // conv (w, b; groups): a kernel_h x kernel_w kernel over a grid_h x grid_w grid of each
  // sample's tokens (conv1d: 1 x k over 1 x T), zero-padded to keep the grid: `causal` pads
  // k - 1 before, else (k - 1) / 2 before and the rest after (torch's padding="same").
  int kernel_h = 1, kernel_w = 1, grid_h = 1, grid_w = 1;
  int wg = -1, bg = -1, wu = -1, bu = -1;                // glu: gate and up projections
  const Activation* act = nullptr;                       // activation, glu: the function
  // residual_begin, residual_end: index of the matching marker; branch_next: of the block's end.
  int partner = -1;
  bool parallel = false;  // residual_begin, residual_end: of a parallel block (branch_next inside)
};

struct ModelParam {
  std::string name;  // dotted, e.g. "layers.0.body.1.k_proj.bias"
  ParamRole role;
  int op;            // the op that uses it
  Mat value;
  // The network's parameter it was compiled from; valid while that network lives (lend_values).
  const Param* source = nullptr;
};

struct Model {
  int batch = 0, tokens = 0, in_features = 0, out_features = 0;
  int grid_h = 0, grid_w = 0;  // shape.grid, 0 when there is none
  // The cross-attention context's tokens per sample (0: none). Its B * context_tokens rows, of
  // width in_features, follow the N input rows in what draw_input returns and forward() takes.
  int context_tokens = 0;
  Eigen::Index context_rows() const { return Eigen::Index(batch) * context_tokens; }
  DType dtype = DType::float64;
  std::vector<Op> ops;
  std::vector<ModelParam> params;
  int find_param(const std::string& name) const;  // -1 when absent
  bool copy_values = true;  // (while compiling: whether the params take copies of the values)
};

// The model of a network. `values` false: every parameter's value is left empty, for
// lend_values to fill.
Model compile(const Network& net, bool values = true);
// The analysis holds every parameter once, not twice: lend_values moves each value of the
// network `m` was compiled from (without values) into `m`, return_values moves them back (`m`'s
// are then empty). The network must outlive both calls and must not change between them; it is
// written through ModelParam::source (it is not const: compile takes it as const only to read).
// A network thrown away after lending (a folded one) is never given them back.
void lend_values(Model& m);
void return_values(Model& m);

// Multiply-add count of one forward pass, times 2 (FLOPs), for throughput figures; from op
// `from_op` on (a perturbed run restarts there).
double forward_flops(const Model& m, int from_op = 0);

// The input the config describes: (B*T, F) drawn from the seed; `stream` selects independent
// inputs (0 is the experiment's own input; structural checks use 1, 2, ...). With
// cross-attention the input's own context, (B * context_tokens, F) drawn independently, follows
// its rows.
Mat draw_input(const ExperimentConfig& config, int stream);
// The tokens of the context cross-attention layers read (0: none).
int context_tokens(const std::vector<LayerConfig>& layers);

}  // namespace biaslab
