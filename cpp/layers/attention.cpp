// The attention layer kind: options, checks, parameters, compile steps and sentences (no
// arithmetic: compiled for size in the page's engine). Its op's forward and JVP are
// attention_kernel.cpp.
#include "layers/attention.hpp"
#include "layers/layer.hpp"

namespace biaslab {

namespace kinds {
namespace {

constexpr const char* kRopeStyles[] = {"half", "interleaved", nullptr};
constexpr const char* kQkNorms[] = {"none", "layernorm", "rmsnorm", nullptr};
constexpr LayerOption kOptions[] = {
    {integer("num_heads", 4, 1, Limits::max_num_heads, "heads",
             "Number of attention heads; must divide the width."),
     &LayerConfig::num_heads},
    {integer("num_kv_heads", 0, 1, Limits::max_num_heads, "heads",
             "Key/value heads (grouped-query attention; 1: multi-query); must divide num_heads. Query "
             "head h reads key/value head h / (num_heads / num_kv_heads), as Hugging Face's repeat_kv.",
             "num_heads"),
     &LayerConfig::num_kv_heads},
    {flag("q_bias", true, "Adds a bias to the query projection."), &LayerConfig::q_bias},
    {flag("k_bias", true, "Adds a bias to the key projection."), &LayerConfig::k_bias},
    {flag("v_bias", true, "Adds a bias to the value projection."), &LayerConfig::v_bias},
    {flag("o_bias", true, "Adds a bias to the output projection."), &LayerConfig::o_bias},
    {flag("causal", false, "Lets each token attend only to itself and earlier tokens."),
     &LayerConfig::causal},
    {flag("sinks", false,
          "Adds one learned logit per head to every softmax row (attention sinks, as gpt-oss): each row's "
          "weights over the tokens then sum to less than 1."),
     &LayerConfig::sinks},
    {flag("rope", false, "Rotates queries and keys by position (RoPE); needs an even head dimension."),
     &LayerConfig::rope},
    {needs(integer("rotary_dim", 0, 2, Limits::max_features, "dimensions",
                   "With rope: how many leading dimensions of each head rotate (partial RoPE, as "
                   "GPT-NeoX and Pythia); even, at most the head dimension; omit it to rotate them all.",
                   "the head dimension"),
           "rope"),
     &LayerConfig::rotary_dim},
    {needs(choice("rope_style", kRopeStyles, 0,
                  "With rope: half rotates dimension i with i + r/2 (rotate_half: Llama, GPT-NeoX); "
                  "interleaved rotates 2i with 2i + 1 (GPT-J)."),
           "rope"),
     &LayerConfig::rope_style},
    {needs(number("rope_base", 10000, 1, true, 1e12,
                  "With rope: pair i turns by position * rope_base^(-2i/r) (Llama 10000, Qwen2 1000000)."),
           "rope"),
     &LayerConfig::rope_base},
    {choice("qk_norm", kQkNorms, 0,
            "Normalises every head's queries and keys over the head dimension after the projections and "
            "before RoPE, as Qwen3 (rmsnorm; layernorm also adds a shift): q_norm and k_norm, each one gain "
            "(and shift) of head_dim values shared by the heads, eps 1e-6."),
     &LayerConfig::qk_norm},
    {integer("context_tokens", 0, 0, Limits::max_tokens, "tokens",
             "Cross-attention, as Whisper's and T5's decoders: the queries come from the layer's input, the keys "
             "and values from a context of this many tokens and shape.features wide (the encoder's output), drawn "
             "with every input and shared by the stack's cross-attention layers. 0: self-attention.",
             "self-attention"),
     &LayerConfig::context_tokens},
};

std::optional<Error> check(const LayerConfig& c, int in, const std::string& path) {
  if (in % c.num_heads != 0)
    return Error{path + ".num_heads", std::to_string(c.num_heads) + " does not divide features " + std::to_string(in)};
  const int head_dim = in / c.num_heads;
  if (c.num_kv_heads != 0 && c.num_heads % c.num_kv_heads != 0)
    return Error{path + ".num_kv_heads", std::to_string(c.num_kv_heads) + " does not divide num_heads " +
                                             std::to_string(c.num_heads)};
  if (c.context_tokens > 0 && (c.causal || c.rope))
    return Error{path + ".context_tokens",
                 std::string("cross-attention reads a separate context, and ") +
                     (c.causal ? "causal masks a token's own sequence" : "rope turns by positions in one sequence") +
                     ": set " + (c.causal ? "causal" : "rope") + " to false, or context_tokens to 0 for self-attention"};
  if (!c.rope) return std::nullopt;  // the RoPE options need rope (Spec::needs_flag, checked by the parser)
  if (c.rotary_dim != 0) {
    if (c.rotary_dim % 2 != 0 || c.rotary_dim > head_dim)
      return Error{path + ".rotary_dim", "must be even and at most the head dimension " + std::to_string(head_dim) +
                                             " (features " + std::to_string(in) + " / " + std::to_string(c.num_heads) +
                                             " heads), got " + std::to_string(c.rotary_dim)};
    return std::nullopt;
  }
  if (head_dim % 2 != 0)
    return Error{path + ".rope", "rope needs an even head dimension, got " + std::to_string(head_dim) +
                                     " (features " + std::to_string(in) + " / " + std::to_string(c.num_heads) +
                                     " heads)"};
  return std::nullopt;
}

// q_proj, k_proj, v_proj, o_proj: weight (out, in) and bias (out, 1), as torch.nn.Linear; k and v
// are kv_heads * head_dim wide.
void params(const LayerConfig& c, int in, int, std::vector<ParamSpec>& ps) {
  const bool on[] = {c.q_bias, c.k_bias, c.v_bias, c.o_bias};
  const char* names[] = {"q_proj.", "k_proj.", "v_proj.", "o_proj."};
  const int kv = attention_kv_heads(c) * (in / c.num_heads);
  const int source = c.context_tokens > 0 ? c.context_features : in;  // what k and v read
  const int rows[] = {in, kv, kv, in}, cols[] = {in, source, source, in};
  // gpt-oss's `sinks`: one logit per head, bias-like (a learned additive term of the softmax). First,
  // as in its state dict (a module's own parameters before its submodules').
  if (c.sinks) ps.push_back({"sinks", ParamRole::bias, c.num_heads, 1, Init::shift, in});
  const int head_dim = in / c.num_heads;
  for (int i = 0; i < 4; ++i) {
    if (i == 3 && c.qk_norm != QkNorm::none)  // q_norm and k_norm (Qwen3's names), before o_proj's op
      for (const char* norm : {"q_norm.", "k_norm."}) {
        ps.push_back({std::string(norm) + "weight", ParamRole::gain, head_dim, 1, Init::gain, head_dim});
        if (c.qk_norm == QkNorm::layernorm)
          ps.push_back({std::string(norm) + "bias", ParamRole::shift, head_dim, 1, Init::shift, head_dim});
      }
    ps.push_back({std::string(names[i]) + "weight", ParamRole::weight, rows[i], cols[i], Init::fan_in, cols[i]});
    if (on[i]) ps.push_back({std::string(names[i]) + "bias", ParamRole::bias, rows[i], 1, Init::fan_in, cols[i]});
  }
}

void compile(CompileContext& ctx) {
  Op op = ctx.op(OpKind::attention);
  const int at = ctx.next();
  op.heads = ctx.cfg().num_heads;
  op.kv_heads = attention_kv_heads(ctx.cfg());
  op.causal = ctx.cfg().causal;
  op.rope = ctx.cfg().rope;
  op.rotary_dim = ctx.cfg().rotary_dim > 0 ? ctx.cfg().rotary_dim : ctx.node().in_width / op.heads;
  op.rope_interleaved = ctx.cfg().rope_style == RopeStyle::interleaved;
  op.rope_base = ctx.cfg().rope_base;
  op.context = ctx.cfg().context_tokens;
  op.keys = op.context > 0 ? op.context : ctx.model().tokens;
  op.sinks = ctx.param("sinks", at);
  op.wq = ctx.param("q_proj.weight", at);
  op.bq = ctx.param("q_proj.bias", at);
  op.wk = ctx.param("k_proj.weight", at);
  op.bk = ctx.param("k_proj.bias", at);
  op.wv = ctx.param("v_proj.weight", at);
  op.bv = ctx.param("v_proj.bias", at);
  op.qk_norm = ctx.cfg().qk_norm != QkNorm::none;
  op.qk_norm_kind = ctx.cfg().qk_norm == QkNorm::rmsnorm ? NormKind::rms : NormKind::layer;
  op.qn_gain = ctx.param("q_norm.weight", at);
  op.qn_shift = ctx.param("q_norm.bias", at);
  op.kn_gain = ctx.param("k_norm.weight", at);
  op.kn_shift = ctx.param("k_norm.bias", at);
  ctx.emit(op);
  // The output projection is an ordinary linear op, so trailing-linear analysis and folds treat
  // it like any Linear.
  Op o = ctx.op(OpKind::linear);
  o.w = ctx.param("o_proj.weight", at + 1);
  o.b = ctx.param("o_proj.bias", at + 1);
  ctx.emit(o);
}

std::string explain(const Op& at, int) {
  return at.context > 0 ? "feeds the query projection of a cross-attention layer" : "feeds the projections of an attention layer";
}

// The q, k and v biases enter inside the layer: what the scores and softmax do to them.
std::string explain_own(const Op& op, const std::string& local, int k, int n) {
  if (local == "sinks")
    return std::string("a head's sink logit sets how much of each row's weight goes to no token: it scales the "
                       "head's output by a factor that differs per row") +
           (k > 0 ? "; what follows cancels part of that" : "");
  if (local == "k_norm.bias") {
    const int head_dim = op.in / op.heads;
    if (k == n)
      return "added to every normalised key of a head, it adds q_i . b to a whole score row; softmax is shift invariant";
    if (op.rope && k > 0 && op.rotary_dim < head_dim)
      return "RoPE rotates only the first " + std::to_string(op.rotary_dim) + " of each head's " +
             std::to_string(head_dim) + " dimensions: the shared key shift on the others adds q_i . b to a whole "
             "score row (softmax cancels it), on the rotated ones it varies along the row";
    if (op.rope) return "added to every normalised key of a head, then rotated by RoPE: q_i . R_j b varies along the row";
    if (op.sinks >= 0)
      return "adds q_i . b to every score of row i but not to the sink logit: the shift moves weight between the "
             "tokens and the sink";
    return "added to every normalised key of a head";
  }
  if (local == "q_norm.bias")
    return k > 0 ? "adds b . k_j to the scores; the normalised keys have zero mean over each head, so along "
                   "1 / k_norm.weight it adds the same amount to a whole row, which softmax cancels"
                 : "adds b . k_j to the scores, which varies with the key j";
  if ((local == "k_proj.bias" || local == "q_proj.bias") && op.qk_norm)
    return std::string("qk_norm normalises each head after the bias, so the bias changes the normalised ") +
           (local == "k_proj.bias" ? "keys differently per key" : "queries differently per query") +
           (k > 0 ? "; only each head's mean, which the LayerNorm subtracts, cancels" : "");
  if (local == "k_proj.bias" && op.sinks >= 0 && k == 0)
    return "adds q_i . b_K to every score of row i but not to the sink logit: the shift moves weight between "
           "the tokens and the sink, so softmax does not cancel it";
  if (local == "v_proj.bias" && op.sinks >= 0)
    return "with sinks the weights of row i over the tokens sum to 1 - p_sink(i) < 1, so token i gains "
           "(1 - p_sink(i)) W_O b_V, which varies per token: it does not fold into the output bias";
  if (local == "k_proj.bias") {
    const int head_dim = op.in / op.heads;
    if (op.rope && k > 0 && k < n && op.rotary_dim < head_dim)
      return "RoPE rotates only the first " + std::to_string(op.rotary_dim) + " of each head's " +
             std::to_string(head_dim) + " dimensions: the key bias on the others adds q_i . b_K to a "
             "whole score row (softmax cancels it), on the rotated ones it varies along the row";
    if (op.rope && k < n)
      return "RoPE rotates the key bias by each key's position, so q_i . R_j b_K varies along the row";
    return std::string("adds q_i . b_K to every score of row i") +
           (op.kv_heads < op.heads ? " (in each query head its group's key bias)" : "") +
           "; softmax is shift invariant" + (op.causal ? " (masked scores stay masked)" : "");
  }
  if (local == "q_proj.bias")
    return op.keys == 1 ? "each softmax row has a single key, whose weight is 1 whatever its score"
                           : "adds b_Q . k_j to the scores, which varies with the key j";
  if (local == "v_proj.bias") {
    std::string s = op.kv_heads < op.heads
                        ? "softmax rows sum to 1, so every token gains W_O repeat_kv(b_V): it folds into the output bias"
                        : "softmax rows sum to 1, so every token gains W_O b_V: it folds into the output bias";
    if (k > 0) s += "; what follows cancels the part of W_O b_V it cannot see";
    return s;
  }
  return "";  // o_proj.bias: after the layer, like any Linear's
}

// q, k and v read the input; o_proj writes the output.
constexpr Projection kReads[] = {{"q_proj.", &LayerConfig::q_bias}, {"k_proj.", &LayerConfig::k_bias},
                                 {"v_proj.", &LayerConfig::v_bias}};
constexpr Projection kWrites{"o_proj.", &LayerConfig::o_bias};
// Cross-attention's input reaches q alone: a norm before it folds into q_proj only.
int reads_count(const LayerConfig& c) { return c.context_tokens > 0 ? 1 : 3; }
constexpr FoldTraits kFolds{kReads, &kWrites, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, reads_count};

std::string torch(const LayerNode& n, TorchNeeds& needs) {
  needs.add("attention");
  if (n.cfg.qk_norm == QkNorm::rmsnorm) needs.add("rmsnorm");
  const LayerConfig& c = n.cfg;
  return "Attention(" + std::to_string(n.in_width) + ", num_heads=" + std::to_string(c.num_heads) +
         (c.num_kv_heads ? ", num_kv_heads=" + std::to_string(c.num_kv_heads) : "") + ", q_bias=" + py_bool(c.q_bias) + ", k_bias=" + py_bool(c.k_bias) + ", v_bias=" + py_bool(c.v_bias) +
         ", o_bias=" + py_bool(c.o_bias) + ", causal=" + py_bool(c.causal) + ", rope=" + py_bool(c.rope) +
         (c.rotary_dim ? ", rotary_dim=" + std::to_string(c.rotary_dim) : "") +
         (c.rope_style == RopeStyle::interleaved ? ", rope_style=\"interleaved\"" : "") +
         (c.rope_base != 10000.0 ? ", rope_base=" + py_float(c.rope_base) : "") + (c.sinks ? ", sinks=True" : "") +
         (c.qk_norm == QkNorm::none ? "" : c.qk_norm == QkNorm::layernorm ? ", qk_norm=\"layernorm\"" : ", qk_norm=\"rmsnorm\"") +
         (c.context_tokens ? ", context_tokens=" + std::to_string(c.context_tokens) + ", context_size=" + std::to_string(c.context_features) : "") + ")";
}

}  // namespace

extern const LayerKind attention{LayerType::attention, "attention",
                                 "Multi-head self-attention with query, key, value and output projections.",
                                 kOptions, check, nullptr, params, compile, explain,
                                 /*has_body=*/false, nullptr, &kFolds, explain_own};

// How the PyTorch script builds it (export/torch_kinds.cpp; only the export module links it).
extern const TorchWriter attention_torch = torch;

}  // namespace kinds

}  // namespace biaslab
