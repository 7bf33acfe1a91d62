"""The layer classes of the exported script: torch.nn modules where torch has one, these where it
has not (or where activations must be transposed). The exporter emits only the sections a config
uses, each after the "# Layers" banner, in this order.
"""
from .head import math, nn, torch
from .head import TOKENS, CONTEXT_TOKENS

# @export attention


def rope_cos_sin(tokens, rotary_dim, dtype, base=10000.0, interleaved=False):
    """RoPE tables (T, r): pair i turns by t * base^(-2i/r) at position t (the token index). The
    pairs are features (i, i + r/2), or (2i, 2i + 1) when interleaved."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float64), inv_freq)  # (T, r/2)
    emb = freqs.repeat_interleave(2, dim=-1) if interleaved else torch.cat((freqs, freqs), dim=-1)  # (T, r)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_every_two(x):
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): interleaved pairs, as GPT-J."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Multi-head self-attention as Hugging Face models write it: q/k/v/o_proj Linear modules,
    k and v with num_kv_heads heads (grouped-query attention, repeated to the query heads as
    repeat_kv does), RoPE on q and k after their projections (the first rotary_dim dimensions of
    each head, in rotate_half or interleaved pairs), optional qk_norm before RoPE (LayerNorm or
    RMSNorm over each head's head_dim, eps 1e-6, one q_norm and one k_norm shared by the heads, as
    Qwen3), scores / sqrt(head_dim), optional causal
    mask, and optional sinks: one learned logit per head that joins each row of scores after the
    mask and is dropped after the softmax (Hugging Face's gpt-oss eager attention). With
    context_tokens it is cross-attention (Whisper's encoder_attn): k_proj and v_proj read the
    context (context_size features), which Net sets in `context` before each forward."""
    READS, WRITES = ("q_proj", "k_proj", "v_proj"), "o_proj"  # for the fold helpers

    def __init__(self, hidden_size, num_heads, num_kv_heads=None, q_bias=True, k_bias=True, v_bias=True,
                 o_bias=True, causal=False, rope=False, rotary_dim=None, rope_style="half", rope_base=10000.0,
                 sinks=False, qk_norm="none", context_tokens=0, context_size=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.head_dim = hidden_size // num_heads
        kv_size = self.num_kv_heads * self.head_dim
        self.causal = causal
        self.rope = rope
        self.rotary_dim = rotary_dim or self.head_dim
        self.rope_interleaved = rope_style == "interleaved"
        self.rope_base = rope_base
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=q_bias)
        self.context_tokens = context_tokens
        self.context = None  # (B, context_tokens, context_size): what k_proj and v_proj read
        source = context_size if context_tokens else hidden_size
        self.k_proj = nn.Linear(source, kv_size, bias=k_bias)
        self.v_proj = nn.Linear(source, kv_size, bias=v_bias)
        # q_norm and k_norm before o_proj (Qwen3 registers them after it): the parameters then
        # come in the engine's order, the order its tables list them in
        if qk_norm == "none":
            self.q_norm = self.k_norm = None
        else:
            norm = (lambda: nn.LayerNorm(self.head_dim, eps=1e-6)) if qk_norm == "layernorm" else \
                (lambda: RMSNorm(self.head_dim, eps=1e-6))
            self.q_norm, self.k_norm = norm(), norm()
        if context_tokens:
            self.READS = ("q_proj",)  # the layer's input reaches q alone: a norm before it folds there
            for reader in (self.k_proj, self.v_proj, self.k_norm):  # a row per context token
                if reader is not None:
                    reader.READS_CONTEXT = True
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=o_bias)
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if sinks else None
        self.sink_offset = None  # (B, T, H) added to the sinks per query token: the analysis's reference

    def forward(self, x):  # x: (B, T, F)
        B, T, F = x.shape
        y = self.context if self.context_tokens else x  # what keys and values read
        S = y.shape[1]
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim)
        k = self.k_proj(y).view(B, S, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:  # per head, over head_dim
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, d), (B, KV, T, d)
        v = self.v_proj(y).view(B, S, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            r = self.rotary_dim
            cos, sin = rope_cos_sin(T, r, x.dtype, self.rope_base, self.rope_interleaved)
            turn = rotate_every_two if self.rope_interleaved else rotate_half
            q = torch.cat((q[..., :r] * cos + turn(q[..., :r]) * sin, q[..., r:]), dim=-1)
            k = torch.cat((k[..., :r] * cos + turn(k[..., :r]) * sin, k[..., r:]), dim=-1)
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # kv head j serves query heads j*group .. j*group+group-1
        v = v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)  # (B, H, T, S)
        if self.causal:
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if self.sinks is not None:
            sink = self.sinks.view(1, -1, 1, 1).expand(B, -1, T, 1)
            if self.sink_offset is not None:
                sink = sink + self.sink_offset.transpose(1, 2).unsqueeze(-1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, F)
        return self.o_proj(context)
# @export glu


class GLU(nn.Module):
    """The gated feed-forward block as Hugging Face's LlamaMLP writes it:
    down_proj(act_fn(gate_proj(x)) * up_proj(x)), one bias flag for the three projections."""
    READS, WRITES = ("gate_proj", "up_proj"), "down_proj"  # for the fold helpers
    SHARED_BIAS = True  # one flag for the three projections' biases: a fold can only zero one

    def __init__(self, hidden_size, intermediate_size, activation="silu", bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = {"silu": nn.SiLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh")}[activation]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
# @export conv


def conv_padding(kernel_size, padding):
    """Zeros (before, after) that keep the length: "same" as torch's padding="same" ((k - 1) // 2
    before, the rest after), "causal" k - 1 before."""
    return (kernel_size - 1, 0) if padding == "causal" else ((kernel_size - 1) // 2, kernel_size // 2)


class Conv1d(nn.Conv1d):
    """nn.Conv1d over the tokens of (B, T, C), stride 1, zero-padded to keep T (conv_padding)."""

    def __init__(self, in_channels, out_channels, kernel_size, padding="same", groups=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, groups=groups, bias=bias)
        self.pads = conv_padding(kernel_size, padding)

    def forward(self, x):  # (B, T, C)
        x = torch.nn.functional.pad(x.transpose(1, 2), self.pads)
        return super().forward(x).transpose(1, 2)


class Conv2d(nn.Conv2d):
    """nn.Conv2d over the image grid (H, W) of (B, H * W, C), whose tokens are the positions row by
    row (x.flatten(2).transpose(1, 2) of (B, C, H, W)); stride 1, zero-padded on both axes to keep
    the grid (conv_padding: "causal" pads rows above and columns to the left)."""

    def __init__(self, in_channels, out_channels, kernel_size, padding="same", groups=1, bias=True, grid=(1, 1)):
        super().__init__(in_channels, out_channels, kernel_size, groups=groups, bias=bias)
        self.pads = conv_padding(kernel_size, padding) * 2  # (left, right, top, bottom)
        self.grid = grid

    def forward(self, x):  # (B, H * W, C)
        B, T, C = x.shape
        x = torch.nn.functional.pad(x.transpose(1, 2).reshape(B, C, *self.grid), self.pads)
        return super().forward(x).flatten(2).transpose(1, 2)
# @export pos_embedding


class PositionEmbedding(nn.Module):
    """A learned table added to (B, T, F), one row per position: GPT-2's wpe read at positions
    0..T-1, ViT's position_embeddings. The table is a bias that differs per position."""
    TABLE = True  # for the analysis and the fold helpers: `weight` is bias-like, centred per row

    def __init__(self, positions, features):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(positions, features))

    def forward(self, x):
        return x + self.weight
# @export rmsnorm


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) over the features of each token, then an optional gain."""

    def __init__(self, hidden_size, eps=1e-6, elementwise_affine=True):
        super().__init__()
        self.eps = eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):  # x: (B, T, F)
        x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight if self.weight is not None else x
# @export layer_norm_without_bias


def layer_norm_without_bias(features, eps):
    """nn.LayerNorm with a gain but no shift (torch >= 2.1 spells it bias=False; 1.13 has no
    such argument, and F.layer_norm accepts a missing bias)."""
    norm = nn.LayerNorm(features, eps=eps)
    norm.register_parameter("bias", None)
    return norm
# @export features_last


class FeaturesLast:
    """BatchNorm1d, InstanceNorm1d and GroupNorm take (N, C, L); activations here are
    (batch, tokens, features), so they are transposed in and out."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)
# @export batchnorm_class


class BatchNorm1d(FeaturesLast, nn.BatchNorm1d):
    pass
# @export batch_norm


def batch_norm(features, eps, affine, mode):
    """nn.BatchNorm1d in `mode`: "train" normalises with the batch statistics, "eval" with
    running_mean and running_var. Those stay buffers no forward updates (they are part of the
    experiment in both modes): with track_running_stats off, train mode uses batch statistics
    without touching them and eval mode still uses them."""
    norm = BatchNorm1d(features, eps=eps, affine=affine)
    norm.track_running_stats = False
    del norm.num_batches_tracked  # a counter, not part of the experiment
    return norm.train(mode == "train")
# @export groupnorm


class GroupNorm(FeaturesLast, nn.GroupNorm):
    pass
# @export instancenorm


class InstanceNorm1d(FeaturesLast, nn.InstanceNorm1d):
    pass
# @export residual


class Residual(nn.Module):
    """x + body(x)."""

    def __init__(self, body):
        super().__init__()
        self.body = nn.ModuleList(body)

    def forward(self, x):
        h = x
        for layer in self.body:
            h = layer(h)
        return x + h
# @export parallel


class Parallel(nn.Module):
    """x + sum of branch(x) over the branches (GPT-J, Pythia's parallel residual)."""

    def __init__(self, branches):
        super().__init__()
        self.branches = nn.ModuleList(nn.Sequential(*branch) for branch in branches)

    def forward(self, x):
        return x + sum(branch(x) for branch in self.branches)
# @export net


class Net(nn.Module):
    """The layer stack; parameter names are biaslab's (layers.0.body.1.k_proj.bias,
    layers.1.branches.0.1.q_proj.weight)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):  # (B, T, F) -> (B, T, F_out)
        if CONTEXT_TOKENS:  # (B, T + CONTEXT_TOKENS, F): the context follows each sample's tokens
            x, context = x[:, :TOKENS], x[:, TOKENS:]
            for module in self.modules():
                if getattr(module, "context_tokens", 0):
                    module.context = context
        for layer in self.layers:
            x = layer(x)
        return x
