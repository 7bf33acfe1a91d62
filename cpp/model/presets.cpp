#include "model/presets.hpp"

namespace biaslab {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"default", "Pre-norm attention block",
       "In x + Attn(LN(x)) only the key bias is redundant; the LayerNorm's gain and shift fold exactly into the q/k/v projections.",
       R"({"version": 1, "seed": 7, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 4}]},
   {"type": "linear", "out_features": 64}]})"},
      {"article2-key-bias", "Key bias, 1024 wide, float32",
       "The second article's check: with 32 heads over 1024 features and 16 tokens, a key bias moves the float32 output only by rounding (mean |delta| near 1e-8).",
       R"({"version": 1, "seed": 42, "dtype": "float32",
 "shape": {"batch": 1, "tokens": 16, "features": 1024},
 "layers": [
   {"type": "attention", "num_heads": 32, "q_bias": false, "k_bias": true, "v_bias": false, "o_bias": false}]})"},
      {"article2-all-biases", "All four projection biases, 1024 wide",
       "The same attention with q, k, v and o biases: only the key bias is redundant; the value bias folds into the output bias.",
       R"({"version": 1, "seed": 42, "dtype": "float32",
 "shape": {"batch": 1, "tokens": 16, "features": 1024},
 "layers": [
   {"type": "attention", "num_heads": 32}]})"},
      {"article4-layernorm-linear", "LayerNorm then Linear",
       "The fourth article's check (batch 20, length 5, dim 10, out 128): LayerNorm(gamma, beta) then Linear(W, b) equals a plain LayerNorm then Linear(W diag(gamma), W beta + b).",
       R"({"version": 1, "seed": 0, "dtype": "float32",
 "shape": {"batch": 20, "tokens": 5, "features": 10},
 "layers": [
   {"type": "layernorm"},
   {"type": "linear", "out_features": 128}]})"},
      {"article1-qk-softmax", "Q/K projections into softmax",
       "The first article's first case: the key bias adds the same amount to every score of a row and cancels in softmax; the query bias does not.",
       R"({"version": 1, "seed": 1, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 8, "features": 32},
 "layers": [
   {"type": "attention", "num_heads": 1, "q_bias": true, "k_bias": true, "v_bias": false, "o_bias": false}]})"},
      {"article1-linear-batchnorm", "Linear then BatchNorm",
       "The first article's second case: BatchNorm in training mode subtracts every feature's batch mean, so the Linear bias before it is redundant in all directions.",
       R"({"version": 1, "seed": 1, "dtype": "float64",
 "shape": {"batch": 4, "tokens": 8, "features": 32},
 "layers": [
   {"type": "linear"},
   {"type": "batchnorm"}]})"},
      {"article1-linear-layernorm", "Linear then LayerNorm",
       "The first article's third case, made precise: LayerNorm cancels only the mean of the Linear bias, one direction out of n.",
       R"({"version": 1, "seed": 1, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 8, "features": 32},
 "layers": [
   {"type": "linear"},
   {"type": "layernorm"}]})"},
      {"prenorm-transformer", "Pre-norm transformer layer",
       "x + Attn(LN(x)), then x + FFN(LN(x)): the key bias is redundant, every other bias is effective, and both LayerNorms fold into the projections after them.",
       R"({"version": 1, "seed": 3, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 4}]},
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "linear", "out_features": 256},
      {"type": "gelu"},
      {"type": "linear", "out_features": 64}]}]})"},
      {"postnorm-transformer", "Post-norm transformer layer",
       "LN(x + Attn(x)), then LN(x + FFN(x)): the key bias is redundant, and only one direction each of the value bias, the output bias and the second FFN bias cancels in the LayerNorm.",
       R"({"version": 1, "seed": 3, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "attention", "num_heads": 4}]},
   {"type": "layernorm"},
   {"type": "residual", "body": [
      {"type": "linear", "out_features": 256},
      {"type": "gelu"},
      {"type": "linear", "out_features": 64}]},
   {"type": "layernorm"}]})"},
      {"prenorm-transformer-rope", "Pre-norm layer with RoPE",
       "The pre-norm layer with rotary position embeddings: the rotated key bias differs per key position, so it is no longer redundant, and attention is no longer permutation invariant.",
       R"({"version": 1, "seed": 3, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 4, "rope": true}]},
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "linear", "out_features": 256},
      {"type": "gelu"},
      {"type": "linear", "out_features": 64}]}]})"},
      {"causal-decoder-layer", "Causal pre-norm layer with RMSNorm",
       "A decoder layer with a causal mask and RMSNorm: the key bias is still redundant (masked scores stay masked), and RMSNorm, which does not centre, cancels no bias direction.",
       R"({"version": 1, "seed": 5, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "rmsnorm"},
      {"type": "attention", "num_heads": 4, "causal": true}]},
   {"type": "residual", "body": [
      {"type": "rmsnorm"},
      {"type": "linear", "out_features": 128},
      {"type": "relu"},
      {"type": "linear", "out_features": 64}]}]})"},
      {"norm-zoo", "A bias before every norm",
       "One Linear bias in front of each normalisation: BatchNorm (train) and InstanceNorm cancel all of it, GroupNorm one direction per group, LayerNorm and softmax one, RMSNorm and BatchNorm (eval) none.",
       R"({"version": 1, "seed": 11, "dtype": "float64",
 "shape": {"batch": 4, "tokens": 8, "features": 32},
 "layers": [
   {"type": "linear"}, {"type": "batchnorm"}, {"type": "gelu"},
   {"type": "linear"}, {"type": "instancenorm", "affine": true}, {"type": "gelu"},
   {"type": "linear"}, {"type": "groupnorm", "num_groups": 4}, {"type": "gelu"},
   {"type": "linear"}, {"type": "layernorm"}, {"type": "gelu"},
   {"type": "linear"}, {"type": "rmsnorm"}, {"type": "gelu"},
   {"type": "linear"}, {"type": "batchnorm", "mode": "eval"}, {"type": "gelu"},
   {"type": "linear"}, {"type": "softmax"}]})"},
      {"llama-block", "Llama 3 block (GQA, SwiGLU), width 64",
       "A Llama 3 decoder block in Llama 3 8B's proportions (8 query heads sharing 2 key/value heads, a SwiGLU 3.5x as wide, RoPE base 500000) at width 64 instead of 4096. It has no biases at all; the two RMSNorm gains fold exactly into q/k/v_proj and gate_proj/up_proj.",
       R"({"version": 1, "seed": 17, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "rmsnorm"},
      {"type": "attention", "num_heads": 8, "num_kv_heads": 2, "q_bias": false, "k_bias": false, "v_bias": false, "o_bias": false, "causal": true, "rope": true, "rope_base": 500000}]},
   {"type": "residual", "body": [
      {"type": "rmsnorm"},
      {"type": "glu", "hidden": 224}]}]})"},
      {"qwen2-block", "Qwen2 block (q/k/v biases under RoPE), width 112",
       "A Qwen2 decoder block in Qwen2-0.5B's proportions (14 query heads over 2 key/value heads, SwiGLU, RoPE base 1000000) at width 112 instead of 896. Qwen2 keeps its q, k and v biases: under RoPE the key bias is no longer redundant, and the value bias folds only into an output bias Qwen2 does not have (its 16 numbers would become 112).",
       R"({"version": 1, "seed": 13, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 112},
 "layers": [
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-06},
      {"type": "attention", "num_heads": 14, "num_kv_heads": 2, "o_bias": false, "causal": true, "rope": true, "rope_base": 1000000}]},
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-06},
      {"type": "glu", "hidden": 608}]}]})"},
      {"gpt-oss-block", "gpt-oss block (attention sinks, GQA), width 64",
       "gpt-oss's attention in gpt-oss-20b's proportions (8 query heads per key/value head, one sink logit per head, q/k/v/o biases, RoPE base 150000) at width 64 instead of 2880, and its MLP as one SwiGLU expert with biases (the router, the clamped activation and the sliding window are not modelled). With sinks every bias is effective: the key bias no longer cancels in softmax, and the value bias no longer folds into the output bias.",
       R"({"version": 1, "seed": 19, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-05},
      {"type": "attention", "num_heads": 8, "num_kv_heads": 1, "sinks": true, "causal": true, "rope": true, "rope_base": 150000}]},
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-05},
      {"type": "glu", "hidden": 64, "bias": true}]}]})"},
      {"qwen3-block", "Qwen3 block (QK-norm, GQA), width 64",
       "A Qwen3 decoder block in Qwen3-8B's proportions (32 query heads over 8 key/value heads becomes 8 over 2, RMSNorm on every head's queries and keys before RoPE, SwiGLU 3x, RoPE base 1000000) at width 64 instead of 4096. Qwen3 dropped Qwen2's q/k/v biases; switch q_bias or k_bias on to see that under an RMS QK-norm no direction of them cancels, and under a LayerNorm QK-norm only each head's mean does.",
       R"({"version": 1, "seed": 37, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-06},
      {"type": "attention", "num_heads": 8, "num_kv_heads": 2, "q_bias": false, "k_bias": false, "v_bias": false, "o_bias": false, "causal": true, "rope": true, "rope_base": 1000000, "qk_norm": "rmsnorm"}]},
   {"type": "residual", "body": [
      {"type": "rmsnorm", "eps": 1e-06},
      {"type": "glu", "hidden": 192}]}]})"},
      {"gpt2-block", "GPT-2 block and ln_f (pre-norm, all biases), width 96",
       "A GPT-2 block in GPT-2 small's proportions (12 heads, an MLP 4x as wide with the tanh GELU, LayerNorm eps 1e-5, causal) at width 96 instead of 768, then GPT-2's final LayerNorm ln_f; the fused c_attn is written as q/k/v_proj and c_fc/c_proj as two Linears. The key bias is redundant (96 numbers here, 768 per layer in GPT-2 small). Every reader of the residual stream is a LayerNorm (ln_1, ln_2, ln_f), so the biases that write into it, the attention output bias and the MLP's c_proj bias (and the value bias through it), each lose their mean: centre_writers removes it, as TransformerLens' center_writing_weights does.",
       R"({"version": 1, "seed": 23, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 96},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm", "eps": 1e-05},
      {"type": "attention", "num_heads": 12, "causal": true}]},
   {"type": "residual", "body": [
      {"type": "layernorm", "eps": 1e-05},
      {"type": "linear", "out_features": 384},
      {"type": "gelu", "approximate": "tanh"},
      {"type": "linear", "out_features": 96}]},
   {"type": "layernorm", "eps": 1e-05}]})"},
      {"pythia-block", "Pythia block (parallel residual, 25% rotary) and final norm, width 96",
       "A Pythia (GPT-NeoX) block in Pythia-160m's proportions (12 heads, rotary_pct 0.25, an MLP 4x as wide with the exact GELU, LayerNorm eps 1e-5, causal, every bias) at width 96 instead of 768, with use_parallel_residual: x + attention(input_layernorm(x)) + mlp(post_attention_layernorm(x)), then final_layer_norm; the fused query_key_value is written as q/k/v_proj. RoPE turns only the first quarter of each head (rotary_dim 2 of 8 here, 16 of 64 in Pythia), so the key bias is redundant exactly on the rest: 72 of 96 numbers here, 576 of 768 in Pythia-160m, which drop_unrotated_key_bias zeroes. The value bias still folds into the attention's output bias (dense). Both branches write into a stream that only LayerNorms read, so the attention's and the MLP's output biases each lose their mean through the parallel sum, and centre_writers centres both. And only their sum matters: each alone is effective, but merge_branch_biases keeps one of the two (96 numbers here, 768 per layer in Pythia-160m).",
       R"({"version": 1, "seed": 31, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 96},
 "layers": [
   {"type": "parallel", "branches": [
      [{"type": "layernorm", "eps": 1e-05},
       {"type": "attention", "num_heads": 12, "causal": true, "rope": true, "rotary_dim": 2}],
      [{"type": "layernorm", "eps": 1e-05},
       {"type": "linear", "out_features": 384},
       {"type": "gelu"},
       {"type": "linear", "out_features": 96}]]},
   {"type": "layernorm", "eps": 1e-05}]})"},
      {"bert-layer", "BERT layer (post-norm), width 96",
       "A BERT encoder layer in BERT-base's proportions (12 heads, intermediate 4x with the exact GELU, LayerNorm eps 1e-12 after each residual sum) at width 96 instead of 768. Post-norm changes the answer: besides the key bias, the LayerNorm after each sum removes one direction (the mean) of every bias that reaches it unchanged: the value bias, the attention output bias and the second FFN bias.",
       R"({"version": 1, "seed": 29, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 96},
 "layers": [
   {"type": "residual", "body": [
      {"type": "attention", "num_heads": 12}]},
   {"type": "layernorm", "eps": 1e-12},
   {"type": "residual", "body": [
      {"type": "linear", "out_features": 384},
      {"type": "gelu"},
      {"type": "linear", "out_features": 96}]},
   {"type": "layernorm", "eps": 1e-12}]})"},
      {"vit-block", "ViT encoder layer with position embeddings, width 96",
       "A ViT-B/16 encoder layer in its proportions (12 heads, an MLP 4x as wide with the exact GELU, LayerNorm eps 1e-12, every bias) at width 96 instead of 768 and on 8 patch tokens instead of 197 (the patch embedding and the class token are left out), after the learned position embeddings and before the final LayerNorm. Every reader of the residual stream is a LayerNorm (layernorm_before, layernorm_after and the final one), so the position table loses each position's mean: 8 of its 768 numbers here, 197 of 151,296 in ViT-B/16. centre_writers removes them, as TransformerLens centres GPT-2's position embeddings, together with the means of the attention's and the MLP's output biases. The key bias is redundant whole.",
       R"({"version": 1, "seed": 47, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 8, "features": 96},
 "layers": [
   {"type": "pos_embedding"},
   {"type": "residual", "body": [
      {"type": "layernorm", "eps": 1e-12},
      {"type": "attention", "num_heads": 12}]},
   {"type": "residual", "body": [
      {"type": "layernorm", "eps": 1e-12},
      {"type": "linear", "out_features": 384},
      {"type": "gelu"},
      {"type": "linear", "out_features": 96}]},
   {"type": "layernorm", "eps": 1e-12}]})"},
      {"whisper-decoder-block", "Whisper decoder layer (self- and cross-attention), width 96",
       "A Whisper decoder layer as Hugging Face writes it (WhisperDecoderLayer) in Whisper-tiny's proportions (6 heads, fc1 4x as wide with the exact GELU, LayerNorm eps 1e-5, k_proj without a bias in both attentions) at width 96 instead of 384, on 8 decoder tokens and a context of 12 encoder frames instead of 1,500, then the decoder's final LayerNorm; the output projections are named o_proj here (Whisper's out_proj). Self-attention is causal; the cross-attention (encoder_attn) takes its keys and values from the context (context_tokens 12). Permuting the context's tokens changes nothing; permuting the decoder's tokens does (the causal mask). Every reader of the residual stream is a LayerNorm, so both o_proj biases and fc2's bias lose their mean, 1 of 96 each (centre_writers), and each value bias folds into its o_proj bias (fold_value_bias), with the same mean redundant. The LayerNorm before self-attention folds into q_proj, k_proj and v_proj, which gives k_proj a bias that drop_key_bias removes again; the one before encoder_attn folds into q_proj alone, since its keys and values read the context.",
       R"({"version": 1, "seed": 53, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 8, "features": 96},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 6, "k_bias": false, "causal": true}]},
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 6, "k_bias": false, "context_tokens": 12}]},
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "linear", "out_features": 384},
      {"type": "gelu"},
      {"type": "linear", "out_features": 96}]},
   {"type": "layernorm"}]})"},
      {"resnet-basic-block", "ResNet basic block (conv3x3-BN-ReLU x 2, skip), 64 channels",
       "ResNet-18's first basic block as torchvision writes it: conv1 (3x3, padding 1) -> bn1 -> ReLU -> conv2 -> bn2, plus the input, then ReLU, with 64 channels as in ResNet-18's first stage on an 8 x 8 grid instead of 56 x 56, BatchNorm in training mode. torchvision builds these convolutions with bias=False; here their biases are on, to ask whether they matter. They do not: each BatchNorm (train) subtracts its channel's mean over the batch and every position, so both conv biases are redundant whole (64 of 64 each), and drop_bias_before_norm removes them. The BatchNorm shifts stay effective: a ReLU follows each (the second after the skip sum). In eval mode the same BatchNorms fuse into the convolutions instead (fuse_conv_batchnorm_eval).",
       R"({"version": 1, "seed": 41, "dtype": "float64",
 "shape": {"batch": 2, "features": 64, "grid": [8, 8]},
 "layers": [
   {"type": "residual", "body": [
      {"type": "conv2d", "kernel_size": 3},
      {"type": "batchnorm"},
      {"type": "relu"},
      {"type": "conv2d", "kernel_size": 3},
      {"type": "batchnorm"}]},
   {"type": "relu"}]})"},
      {"convnext-block", "ConvNeXt block (depthwise 7x7, LayerNorm, MLP), width 96",
       "A ConvNeXt-T block at its real width (96 channels, stage 1) on a 7 x 7 grid instead of 56 x 56: a depthwise 7x7 convolution (groups 96, padding 3), LayerNorm over the channels (eps 1e-6), pwconv1 to 384, GELU, pwconv2 back to 96, added to the input, then the LayerNorm that opens the next downsampling layer; the layer scale gamma is left out (a per-channel gain, it folds into pwconv2). The depthwise conv's bias is constant over the positions, so the LayerNorm after it cancels its mean: 1 of 96 is redundant (centre_bias_before_norm). pwconv2's bias reaches the next LayerNorm through the skip sum and loses its mean the same way. The LayerNorm's gain and shift fold into pwconv1 (fold_layernorm_affine).",
       R"({"version": 1, "seed": 43, "dtype": "float64",
 "shape": {"batch": 2, "features": 96, "grid": [7, 7]},
 "layers": [
   {"type": "residual", "body": [
      {"type": "conv2d", "kernel_size": 7, "groups": 96},
      {"type": "layernorm", "eps": 1e-06},
      {"type": "linear", "out_features": 384},
      {"type": "gelu"},
      {"type": "linear", "out_features": 96}]},
   {"type": "layernorm", "eps": 1e-06}]})"},
      {"few-tokens-trap", "One short sequence: the trap",
       "With one sequence of 4 tokens and 128 features in 2 heads, a single input shows 122 spurious null directions of the query bias; stacking inputs finds the true answer, 0.",
       R"({"version": 1, "seed": 2, "dtype": "float64",
 "shape": {"batch": 1, "tokens": 4, "features": 128},
 "layers": [
   {"type": "attention", "num_heads": 2, "v_bias": false, "o_bias": false}]})"},
  };
  return all;
}

const Preset* find_preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace biaslab
