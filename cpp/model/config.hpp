// The experiment config, format v1: what users write and share.
//
// The schema drives parsing, printing, defaults, the `schema` command, the web form and the
// tests: each layer kind lists its options in its file (cpp/layers), bound to members of
// LayerConfig, and config.cpp walks those lists. A LayerConfig holds the options of every kind;
// a kind with a new option adds its member here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.hpp"

#include "core/status.hpp"

namespace biaslab {

// One enumerator per layer kind, in registry order (cpp/layers/kinds.def).
enum class LayerType {
#define BIASLAB_LAYER(name) name,
#include "layers/kinds.def"
#undef BIASLAB_LAYER
};
enum class DType { float32, float64 };
enum class BatchNormMode { train, eval };
enum class GeluApprox { none, tanh };
enum class RopeStyle { half, interleaved };
enum class QkNorm { none, layernorm, rmsnorm };
enum class GluActivation { silu, gelu, gelu_tanh };
enum class ConvPadding { same, causal };

// Options of all layer types; only those the schema lists for `type` are meaningful. Defaults
// depend on the type (PyTorch's: InstanceNorm1d has affine=False), so build layers with
// make_layer(type), which applies the schema's defaults; the member initialisers are only a
// fallback.
struct LayerConfig {
  LayerType type = LayerType::linear;
  // linear
  int out_features = 0;  // 0: same as the input width (the schema default)
  bool bias = true;      // linear, layernorm (torch >= 2.1 `bias=`)
  // norms
  bool elementwise_affine = true;  // layernorm, rmsnorm
  bool affine = true;              // batchnorm, groupnorm, instancenorm (default false there)
  double eps = 1e-5;               // every norm (rmsnorm defaults to 1e-6)
  BatchNormMode mode = BatchNormMode::train;
  int num_groups = 4;
  // attention
  int num_heads = 4;
  int num_kv_heads = 0;                    // 0: num_heads (grouped-query attention when fewer)
  bool q_bias = true, k_bias = true, v_bias = true, o_bias = true;
  bool causal = false, rope = false;
  bool sinks = false;  // one learned logit per head in each softmax row (gpt-oss)
  int rotary_dim = 0;                      // 0: the whole head dimension
  RopeStyle rope_style = RopeStyle::half;
  double rope_base = 10000.0;
  QkNorm qk_norm = QkNorm::none;  // per-head norm of queries and keys (Qwen3)
  int context_tokens = 0;  // cross-attention: keys and values from a context of that many tokens
  // gelu
  GeluApprox approximate = GeluApprox::none;
  // glu (and bias, shared by its three projections as Hugging Face's mlp_bias)
  int hidden = 0;  // 0: 4 x the input width
  GluActivation activation = GluActivation::silu;
  // conv1d, conv2d (and bias): zero-padded, stride 1, so the tokens keep their number
  int out_channels = 0;  // 0: the input width
  int kernel_size = 3;
  ConvPadding padding = ConvPadding::same;
  int groups = 1;  // depthwise when it equals the input width
  // pos_embedding: the table's rows, shape.tokens (not an option: set where the network is built
  // and checked, so that a kind declares its parameters from the config alone)
  int positions = 0;
  // attention with context_tokens: the context's width, shape.features (set alike)
  int context_features = 0;
  // residual: computes x + body(x)
  std::vector<LayerConfig> body;
  // parallel: computes x + the sum of branch(x) over its branches
  std::vector<std::vector<LayerConfig>> branches;
};

struct Shape {
  int batch = 2, tokens = 16, features = 64;
  // An image grid [H, W] (empty: none): the tokens of a sample are its H x W positions, row by
  // row (torch's x.flatten(2).transpose(1, 2) of (B, C, H, W)), so tokens = H * W.
  std::vector<int> grid;
};

struct ExperimentConfig {
  int version = 1;
  std::uint64_t seed = 0;
  DType dtype = DType::float64;
  Shape shape;
  std::vector<LayerConfig> layers;
  // Learned weights and biases, as the parser counted them (0 where the config was not parsed);
  // not a field of the format.
  long long parameters = 0;
};

// Limits that keep every analysis bounded in memory and time (checked by the parser, stated by
// `biaslab schema`).
struct Limits {
  static constexpr int max_batch = 256;
  static constexpr int max_tokens = 1024;
  static constexpr int max_features = 8192;
  static constexpr int max_tokens_total = 4096;        // batch * tokens
  static constexpr long max_activations = 1L << 21;    // batch * tokens * widest layer
  static constexpr int max_layers = 64;                // counted through residual bodies
  static constexpr int max_depth = 8;                  // residual nesting
  static constexpr long max_parameters = 1L << 26;     // 67 M
  static constexpr int max_num_heads = 256;
};

// Parses and validates. Errors name the JSON path, e.g. `layers[2].num_heads`.
Result<ExperimentConfig> parse_config(const Json& j);
Result<ExperimentConfig> parse_config_text(const std::string& text);

// Prints only values that differ from the schema defaults (so URLs stay short); `version`,
// `shape` and `layers` are always present. parse_config(config_to_json(c)) == c.
Json config_to_json(const ExperimentConfig& c);
Json layer_to_json(const LayerConfig& l);

// The schema as JSON: per layer type its options (name, type, default, range/enum, help), the
// top-level fields and the limits. One source with the parser.
Json config_schema();

LayerConfig make_layer(LayerType t);
const char* layer_type_name(LayerType t);
const char* dtype_name(DType t);

bool operator==(const LayerConfig& a, const LayerConfig& b);
inline bool operator!=(const LayerConfig& a, const LayerConfig& b) { return !(a == b); }
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b);

}  // namespace biaslab
