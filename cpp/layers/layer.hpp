// The layer registry: what one layer kind is, in one place.
//
// Each kind is a LayerKind value defined in its own file, cpp/layers/<kind>.cpp, and listed once
// in cpp/layers/kinds.def (which also makes the LayerType enumerator). Everything outside
// cpp/layers iterates the registry: the schema, parsing, printing and validation
// (model/config.cpp), parameters and compiling to ops (model/network.cpp), the sentence that
// explains a bias (analysis), and the PyTorch script (export/torch_export.cpp, through the
// writers table export/torch_kinds.cpp). A kind compiles to ops of a small fixed vocabulary
// (OpKind: linear, norm, activation, softmax, attention, glu, residual markers) whose forward and
// JVP live beside the kinds that use them (norm.cpp, attention_kernel.cpp, glu.cpp, softmax.cpp,
// ops.hpp); an activation brings its own function and
// derivative (Activation), so a new one needs no change to the drivers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "layers/ops.hpp"
#include "layers/options.hpp"
#include "model/model.hpp"

namespace biaslab {

// A read-only view of a constexpr table (C++17 has no std::span).
template <class T>
struct Items {
  const T* first = nullptr;
  std::size_t count = 0;
  template <std::size_t N>
  constexpr Items(const T (&a)[N]) : first(a), count(N) {}
  constexpr Items() = default;
  const T* begin() const { return first; }
  const T* end() const { return first + count; }
};

// How a parameter's initial values are drawn (model/network.cpp): projections as torch.nn.Linear,
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); norm gains U(0.5, 1.5) and shifts U(-0.5, 0.5) (random, not
// 1 and 0, so every fold is a real test); running mean U(-0.5, 0.5), running var U(0.5, 2).
enum class Init { fan_in, gain, shift, run_mean, run_var };

// One parameter a kind declares: (rows, cols) as in torch, e.g. Linear.weight is (out, in).
struct ParamSpec {
  std::string local;  // the name inside the layer, e.g. "k_proj.bias"
  ParamRole role;
  int rows, cols;
  Init init;
  int fan_in;
};

// Given to a kind's compile(): appends this layer's ops to the model.
class CompileContext {
 public:
  using CompileSeq = void (*)(Model&, const std::vector<LayerNode>&, const std::string& prefix);
  CompileContext(Model& m, const LayerNode& node, std::string name, int index, CompileSeq seq)
      : m_(m), node_(node), name_(std::move(name)), index_(index), seq_(seq) {}
  const LayerNode& node() const { return node_; }
  const LayerConfig& cfg() const { return node_.cfg; }
  const Model& model() const { return m_; }
  // A new op of this layer (widths and names filled in); `kind` is its op family.
  Op op(OpKind kind) const;
  // The index of the op emit() adds next.
  int next() const { return static_cast<int>(m_.ops.size()); }
  // Adds this layer's parameter `local` to the model, used by op `op_index`; -1 when absent.
  int param(const std::string& local, int op_index);
  void emit(const Op& op) { m_.ops.push_back(op); }
  Op& at(int i) { return m_.ops[i]; }
  // Compiles the layer's body (residual) or its branch `b` (parallel) here.
  void body() { seq_(m_, node_.body, body_prefix(name_)); }
  void branch(size_t b) { seq_(m_, node_.branches[b], branch_prefix(name_, b)); }

 private:
  Model& m_;
  const LayerNode& node_;
  std::string name_;
  int index_;
  CompileSeq seq_;
};

// What the PyTorch script needs: Python sections by name (python/biaslab_torch, `# @export`).
struct TorchNeeds {
  Shape shape;  // the experiment's, for classes with a variant for one value
  std::vector<std::string> sections;
  void add(const std::string& s) {
    for (const auto& x : sections)
      if (x == s) return;
    sections.push_back(s);
  }
  bool has(const std::string& s) const {
    for (const auto& x : sections)
      if (x == s) return true;
    return false;
  }
};

// A projection x W^T + b inside a layer: parameters <prefix>weight (out, in) and <prefix>bias,
// the bias present when the config member `bias` is set.
struct Projection {
  const char* prefix;
  bool LayerConfig::*bias;
};

// What a layer declares for the fold rules (cpp/folds), which match neighbours on these and never
// on kind names.
struct FoldTraits {
  // The projections that read the layer's input directly: a norm's affine before the layer folds
  // into each of them.
  Items<Projection> reads;
  // The projection whose output is the layer's output: its bias is what a following norm may
  // cancel, and what LayerNorm -> RMSNorm centres. Null: none.
  const Projection* writes = nullptr;
  // A learned shift added to the output (a norm's "bias"), which a following norm may cancel
  // too; `shift_flag` removes it where the config has a flag for it alone (else it is zeroed).
  const char* shift = nullptr;
  bool LayerConfig::*shift_flag = nullptr;
  // What the layer does to a vector b added to its input: whether it cancels b whatever b is,
  // and over how many equal groups of features it cancels b's mean (0: it does not).
  bool (*cancels_shift)(const LayerConfig& c) = nullptr;
  int (*cancels_mean_groups)(const LayerConfig& c) = nullptr;
  // Whether the rows of the `writes` weight read different inputs (a grouped convolution): the
  // rules that centre those rows (W - 1 mean(W)) then leave the layer alone. Null: never.
  bool (*grouped)(const LayerConfig& c) = nullptr;
  // A learned table added to the input, one row per position (pos_embedding's weight, held flat
  // as (positions * features, 1)): the rules that centre a bias centre each of its rows (or,
  // before GroupNorm, each group across the rows). Null: none.
  const char* table = nullptr;
  // Whether cancels_mean_groups takes each group's mean over all of a sample's tokens (GroupNorm),
  // not over each token's features (LayerNorm, softmax): the same for a bias, not for a table.
  bool sample_statistics = false;
  // How many of `reads` read the layer's input, the first ones (cross-attention: q only, its k and
  // v read the context). Null: all of them.
  int (*reads_count)(const LayerConfig& c) = nullptr;
};

// The projections that read a layer's input (FoldTraits::reads, less those that read a context).
inline Items<Projection> input_reads(const FoldTraits& t, const LayerConfig& c) {
  Items<Projection> r = t.reads;
  if (t.reads_count) r.count = static_cast<std::size_t>(t.reads_count(c));
  return r;
}

// The torch.nn expression that builds a layer (node.in_width: its input width); notes the Python
// sections it uses. Each kind file defines `kinds::<name>_torch` beside its LayerKind; the table
// of them is export/torch_kinds.cpp, so only the export module links these writers and the page's
// first-load engine does not carry them. Null for layers with a body, which the exporter writes
// around their body.
using TorchWriter = std::string (*)(const LayerNode& node, TorchNeeds& needs);
TorchWriter torch_writer(LayerType t);

struct LayerKind {
  LayerType type;
  const char* name;  // the config's "type"
  const char* help;  // one sentence for the schema and the page's form
  Items<LayerOption> options;
  // Checks beyond each option's own range, at input width `in`: the first problem, at
  // `path`.<option>. Null: none.
  std::optional<Error> (*check)(const LayerConfig& c, int in, const std::string& path) = nullptr;
  // The output width; null: the input width.
  int (*out_width)(const LayerConfig& c, int in) = nullptr;
  // The parameters and buffers, in order. Null: none.
  void (*params)(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& out_params) = nullptr;
  // Appends the layer's ops.
  void (*compile)(CompileContext& ctx) = nullptr;
  // What happens to a bias whose tangent reaches op `at` of this layer (k: its redundant
  // dimension), said in a few words; the analysis prefixes how it got there.
  std::string (*explain_incoming)(const Op& at, int k) = nullptr;
  // Whether the kind holds a body of layers (residual): x + body(x) keeps the width.
  bool has_body = false;
  // Brings the config in line with the parameters after a fold changed them (a Linear's
  // out_features from its weight). Null: nothing to do.
  void (*sync)(LayerNode& node) = nullptr;
  // For the fold rules. Null: the layer declares nothing they can use.
  const FoldTraits* folds = nullptr;
  // What happens to the layer's own bias `local` (redundant dimension k of n) when it enters
  // inside the layer, where what follows cannot explain it (attention's q, k, v biases); "" to
  // let the analysis say what the following layers do to it. Null: always "".
  std::string (*explain_own)(const Op& op, const std::string& local, int k, int n) = nullptr;
  // The widest activation inside the layer (glu's hidden), checked against the activation limit
  // at `path`.<inner_option>. Null: no wider one than its input and output.
  int (*inner_width)(const LayerConfig& c, int in) = nullptr;
  const char* inner_option = nullptr;
  // Whether the kind needs shape.grid (conv2d).
  bool needs_grid = false;
  // The torch shape of parameter `local` where it is not the matrix it is held as (Param::dims:
  // a convolution's weight). Null: none differs.
  TorchShape (*torch_shape)(const LayerConfig& c, int in, int out, const std::string& local) = nullptr;
};

// A kind's fold traits, or empty ones.
const FoldTraits& fold_traits(LayerType t);

// The kind of a LayerType, and all kinds in schema order (kinds.def).
const LayerKind& layer_kind(LayerType t);
Items<const LayerKind*> layer_kinds();
// nullptr when no kind has that name.
const LayerKind* find_layer_kind(const std::string& name);

// Activations other kinds reuse (glu): silu.cpp's, and gelu.cpp's exact or tanh form.
namespace kinds {
const Activation& silu_activation();
const Activation& gelu_activation(bool tanh);
}  // namespace kinds

// Shared by the activation kinds: one activation op, and what a nonlinearity does to a bias.
void compile_activation(CompileContext& ctx, const Activation& act);
std::string explain_nonlinearity(const Op& at, int k);

// Helpers shared by the kinds' torch() functions.
std::string py_float(double v);
const char* py_bool(bool b);

}  // namespace biaslab
