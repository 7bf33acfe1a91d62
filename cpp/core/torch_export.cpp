// The PyTorch script generator. The script is fixed Python text (layer classes, the safetensors
// reader, the analysis) plus three generated parts: the config, build_model() written out layer
// by layer, and the list of folds that apply (found by the engine's own fold rules, so the script
// checks the same folds the report lists). Only the classes and fold helpers a config uses are
// emitted, so a small experiment gives a small script.
#include "core/torch_export.hpp"
#include "core/safetensors.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>

#include "core/folds.hpp"
#include "core/forward.hpp"

namespace biaslab {

namespace {

// ---------------------------------------------------------------------------------------------
// Fixed Python text
// ---------------------------------------------------------------------------------------------

const char* const kImports = R"PY(import argparse
import copy
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch import nn
from torch.autograd.functional import jacobian
from torch.nn.utils.stateless import functional_call
)PY";

const char* const kAttention = R"PY(

def rope_cos_sin(tokens, head_dim, dtype):
    """RoPE tables (T, d), base 10000, position = token index; feature i and i + d/2 share an angle."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float64), inv_freq)  # (T, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, d)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Multi-head self-attention as Hugging Face models write it: q/k/v/o_proj Linear modules,
    RoPE on q and k after their projections, scores / sqrt(head_dim), optional causal mask."""

    def __init__(self, hidden_size, num_heads, q_bias=True, k_bias=True, v_bias=True, o_bias=True,
                 causal=False, rope=False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.causal = causal
        self.rope = rope
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=q_bias)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=k_bias)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=v_bias)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=o_bias)

    def forward(self, x):  # x: (B, T, F)
        B, T, F = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        q = self.q_proj(x).view(heads).transpose(1, 2)  # (B, H, T, d)
        k = self.k_proj(x).view(heads).transpose(1, 2)
        v = self.v_proj(x).view(heads).transpose(1, 2)
        if self.rope:
            cos, sin = rope_cos_sin(T, self.head_dim, x.dtype)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        if self.causal:
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, F)
        return self.o_proj(context)
)PY";

const char* const kRmsNorm = R"PY(

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
)PY";

const char* const kLayerNormWithoutBias = R"PY(

def layer_norm_without_bias(features, eps):
    """nn.LayerNorm with a gain but no shift (torch >= 2.1 spells it bias=False; 1.13 has no
    such argument, and F.layer_norm accepts a missing bias)."""
    norm = nn.LayerNorm(features, eps=eps)
    norm.register_parameter("bias", None)
    return norm
)PY";

const char* const kFeaturesLast = R"PY(

class FeaturesLast:
    """BatchNorm1d, InstanceNorm1d and GroupNorm take (N, C, L); activations here are
    (batch, tokens, features), so they are transposed in and out."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)
)PY";

const char* const kBatchNormClass = R"PY(

class BatchNorm1d(FeaturesLast, nn.BatchNorm1d):
    pass
)PY";

// torch refuses statistics over one element; the engine defines them (x - mean = 0).
const char* const kBatchNormClassOneValue = R"PY(

class BatchNorm1d(FeaturesLast, nn.BatchNorm1d):
    def forward(self, x):
        # torch refuses batch statistics of one value per feature (here batch * tokens = 1), but
        # they are defined (x - mean = 0): a duplicated token leaves the mean and the biased
        # variance exactly unchanged.
        if self.training and x.shape[0] * x.shape[1] == 1:
            return super().forward(torch.cat([x, x], dim=1))[:, :1]
        return super().forward(x)
)PY";

const char* const kBatchNorm = R"PY(

def batch_norm(features, eps, affine, mode):
    """nn.BatchNorm1d in `mode`: "train" normalises with the batch statistics, "eval" with
    running_mean and running_var. Those stay buffers no forward updates (they are part of the
    experiment in both modes): with track_running_stats off, train mode uses batch statistics
    without touching them and eval mode still uses them."""
    norm = BatchNorm1d(features, eps=eps, affine=affine)
    norm.track_running_stats = False
    del norm.num_batches_tracked  # a counter, not part of the experiment
    return norm.train(mode == "train")
)PY";

const char* const kGroupNorm = R"PY(

class GroupNorm(FeaturesLast, nn.GroupNorm):
    pass
)PY";

const char* const kInstanceNorm = R"PY(

class InstanceNorm1d(FeaturesLast, nn.InstanceNorm1d):
    pass
)PY";

const char* const kInstanceNormOneToken = R"PY(

class InstanceNorm1d(FeaturesLast, nn.InstanceNorm1d):
    def forward(self, x):
        # torch refuses instance statistics over one token ("more than 1 spatial element"), but
        # they are defined (x - mean = 0): a duplicated token leaves the mean and the biased
        # variance exactly unchanged.
        if x.shape[1] == 1:
            return super().forward(torch.cat([x, x], dim=1))[:, :1]
        return super().forward(x)
)PY";

const char* const kResidual = R"PY(

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
)PY";

const char* const kNet = R"PY(

class Net(nn.Module):
    """The layer stack; parameter names are biaslab's (layers.0.body.1.k_proj.bias)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):  # (B, T, F) -> (B, T, F_out)
        for layer in self.layers:
            x = layer(x)
        return x
)PY";

// Fold helpers: each rewrites a float64 model in place at (seq, i), as the engine's rule does.
const char* const kFoldBanner = R"PY(

# =============================================================================================
# Exact folds: rewrites of the model that must leave its output unchanged
# =============================================================================================)PY";

const char* const kFoldCommon = R"PY(
def set_bias(linear, value):
    """Gives `linear` the bias `value` (creating the parameter when it had none)."""
    linear.bias = nn.Parameter(value.detach().clone())


def bias_or_zero(linear):
    return linear.bias if linear.bias is not None else torch.zeros(linear.out_features, dtype=linear.weight.dtype)
)PY";

const char* const kFoldFeeder = R"PY(

def feeder(seq, i):
    """The module whose bias is added last before seq[i + 1]: a Linear, an attention's o_proj, a
    norm's shift, or (through a residual add, which passes it on) the last layer of a body."""
    layer = seq[i]
    if hasattr(layer, "body"):  # a Residual
        return feeder(layer.body, len(layer.body) - 1)
    return getattr(layer, "o_proj", layer)  # an attention's last bias is its output projection's
)PY";

const char* const kFoldNormAffine = R"PY(

def fold_norm_affine(seq, i):
    """Norm(x; g, b) -> Linear(W, c)  ==  Norm(x) -> Linear(W diag(g), W b + c); for an attention
    after the norm, into each of q/k/v_proj (TransformerLens fold_ln)."""
    norm, after = seq[i], seq[i + 1]
    projections = [after] if isinstance(after, nn.Linear) else [after.q_proj, after.k_proj, after.v_proj]
    gain, shift = norm.weight, getattr(norm, "bias", None)
    for proj in projections:
        W = proj.weight.clone()
        proj.weight.copy_(W * gain)
        if shift is not None:
            set_bias(proj, W @ shift + bias_or_zero(proj))
    norm.weight = None
    if shift is not None:
        norm.bias = None
)PY";

const char* const kFoldBatchNorm = R"PY(

def batch_norm_eval_scale_shift(bn):
    """BatchNorm (eval) as z -> s z + t."""
    gain = bn.weight if bn.weight is not None else torch.ones_like(bn.running_mean)
    shift = bn.bias if bn.bias is not None else torch.zeros_like(bn.running_mean)
    s = gain / torch.sqrt(bn.running_var + bn.eps)
    return s, shift - s * bn.running_mean
)PY";

const char* const kFoldLinearBn = R"PY(

def fuse_linear_batchnorm_eval(seq, i):
    """Linear(W, b) -> BatchNorm(eval)  ==  Linear(diag(s) W, s b + t) (torch's fuse_linear_bn_eval)."""
    linear, bn = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    b = bias_or_zero(linear)
    linear.weight.copy_(s[:, None] * linear.weight)
    set_bias(linear, s * b + t)
    del seq[i + 1]
)PY";

const char* const kFoldBnLinear = R"PY(

def fuse_batchnorm_eval_linear(seq, i):
    """BatchNorm(eval) -> Linear(W, b)  ==  Linear(W diag(s), W t + b)."""
    bn, linear = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    W = linear.weight.clone()
    set_bias(linear, W @ t + bias_or_zero(linear))
    linear.weight.copy_(W * s)
    del seq[i]
)PY";

const char* const kFoldKeyBias = R"PY(

def drop_key_bias(seq, i):
    """softmax_j(q_i . (k_j + b_K)) = softmax_j(q_i . k_j): q_i . b_K is the same for every key j."""
    seq[i].k_proj.bias = None
)PY";

const char* const kFoldValueBias = R"PY(

def fold_value_bias(seq, i):
    """Softmax rows sum to 1, so the value bias adds W_O b_V to every token: b_O' = b_O + W_O b_V."""
    attention = seq[i]
    o = attention.o_proj
    set_bias(o, o.weight @ attention.v_proj.bias + bias_or_zero(o))
    attention.v_proj.bias = None
)PY";

const char* const kFoldDropBeforeNorm = R"PY(

def drop_bias_before_norm(seq, i):
    """BatchNorm (train) and InstanceNorm subtract every feature's mean: the bias before them cancels."""
    module = feeder(seq, i)
    if isinstance(module, (nn.Linear, nn.LayerNorm)):
        module.bias = None
    else:  # a BatchNorm/GroupNorm/InstanceNorm shift is tied to its gain by affine=True
        module.bias.zero_()
)PY";

const char* const kFoldCentre = R"PY(

def centre_bias_before_norm(seq, i, groups):
    """LayerNorm and softmax cancel a bias's mean, GroupNorm each group's mean: remove them."""
    bias = feeder(seq, i).bias
    grouped = bias.view(groups, -1)
    bias.copy_((grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1))
)PY";

const char* const kFoldLinearLinear = R"PY(

def merge_linear_linear(seq, i):
    """W2 (W1 x + b1) + b2 = (W2 W1) x + (W2 b1 + b2)."""
    a, b = seq[i], seq[i + 1]
    has_bias = a.bias is not None or b.bias is not None
    merged = nn.Linear(a.in_features, b.out_features, bias=has_bias, dtype=a.weight.dtype)
    merged.weight.copy_(b.weight @ a.weight)
    if has_bias:
        merged.bias.copy_(b.weight @ bias_or_zero(a) + bias_or_zero(b))
    seq[i] = merged
    del seq[i + 1]
)PY";

const char* const kFoldLnToRms = R"PY(

def layernorm_to_rmsnorm(seq, i):
    """LN(W x + b) = RMS(C W x + C b) with C = I - 11^T/n, for a LayerNorm without shift: once the
    writer's output rows are centred the LayerNorm subtracts nothing (TransformerLens
    center_writing_weights; Jiang et al. 2023)."""
    writer = getattr(seq[i], "o_proj", seq[i])  # a Linear, or an attention's output projection
    writer.weight.sub_(writer.weight.mean(dim=0, keepdim=True))
    if writer.bias is not None:
        writer.bias.sub_(writer.bias.mean())
    ln = seq[i + 1]
    rms = RMSNorm(ln.normalized_shape[0], eps=ln.eps, elementwise_affine=ln.weight is not None)
    rms = rms.to(writer.weight.dtype)
    if ln.weight is not None:
        rms.weight.copy_(ln.weight)
    seq[i + 1] = rms
)PY";

const char* const kIo = R"PY(

# =============================================================================================
# Weights and input
# =============================================================================================
NUMPY_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}  # little-endian, as the format stores them


def read_safetensors(path):
    """{name: tensor} from a .safetensors file: an 8-byte little-endian header length N, N bytes
    of JSON header (dtype, shape, data_offsets per tensor), then the raw little-endian data."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        sys.exit(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        sys.exit(f"{path}: the header length {header_len} runs past the end of the file")
    header = json.loads(data[8:8 + header_len])
    header.pop("__metadata__", None)
    body = data[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        if info["dtype"] == "BF16":  # the upper half of a float32
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in NUMPY_DTYPES:
            array = np.frombuffer(raw, dtype=NUMPY_DTYPES[info["dtype"]])
        else:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}; this script reads F16, BF16, F32 and F64")
        tensors[name] = torch.from_numpy(array.astype(array.dtype.newbyteorder("="))).reshape(info["shape"])
    return tensors


def load_experiment(model, tensors, path):
    """Copies the file's parameters and buffers into `model`; returns its input. The file must hold
    exactly the model's state dict keys plus `input` (and may hold the engine's `output` and
    `structure_inputs`)."""
    state = model.state_dict()
    expected = set(state) | {"input"}
    missing = sorted(expected - set(tensors))
    unexpected = sorted(set(tensors) - expected - {"output", "structure_inputs"})
    if missing or unexpected:
        sys.exit(f"{path} does not fit this experiment: missing {missing}, unexpected {unexpected}")
    for name, value in list(state.items()) + [("input", torch.empty(BATCH, TOKENS, FEATURES))]:
        if tuple(tensors[name].shape) != tuple(value.shape):
            sys.exit(f"{path}: {name} has shape {list(tensors[name].shape)}, the experiment needs {list(value.shape)}")
    model.load_state_dict({name: tensors[name] for name in state})
    return tensors["input"].to(torch.float64)


def draw_experiment(model, seed):
    """Weights and input from torch's generator: the engine's distributions, not its numbers.
    Projections U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch.nn.Linear's bound); norm gains
    U(0.5, 1.5) and shifts U(-0.5, 0.5) (not 1 and 0, so every fold is a real test); running mean
    U(-0.5, 0.5), running var U(0.5, 2); input N(0, 1)."""
    generator = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=generator, dtype=torch.float64) * (hi - lo) + lo)

    ranges = {"weight": (0.5, 1.5), "bias": (-0.5, 0.5), "running_mean": (-0.5, 0.5), "running_var": (0.5, 2.0)}
    with torch.no_grad():
        for module in model.modules():
            own = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            for name, t in own:
                if isinstance(module, nn.Linear):
                    bound = 1 / math.sqrt(module.in_features)
                    uniform(t, -bound, bound)
                else:
                    uniform(t, *ranges[name])
    return torch.randn(BATCH, TOKENS, FEATURES, generator=generator, dtype=torch.float64)


def round_to_dtype(model, x):
    """A float32 experiment is its values rounded once to float32 (then computed in both precisions)."""
    if DTYPE is torch.float32:
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                t.copy_(t.float().double())
        x = x.float().double()
    return x
)PY";

const char* const kAnalysis = R"PY(

# =============================================================================================
# The analysis: biaslab's report fields (format 1)
# =============================================================================================
FLOOR_FACTOR = 8.0            # a difference is real only above 8 x (rounding of one side + of the other)
ROUNDOFF_RATIO = 2.0 ** -29   # 2^-52 / 2^-23: carries a rounding measured in float32 to float64
STRUCTURE_RTOL = 1e-8         # a singular value <= 1e-8 x the reference scale is null
MIN_SAMPLES = 2               # inputs stacked at least, before "the rank stopped growing" counts
KINK_PATIENCE = 64            # with a ReLU on the way: inputs in a row that add no rank and activate no new unit
VANISH_RTOL = 1e-13           # a tangent at most this x its reference scale is rounding


class Evaluator:
    """One model in float32 and in float64 on the same values, and one input. run() gives the
    output in the experiment's dtype and its rounding error, measured as max |y32 - y64| (for
    float64 scaled by 2^-29: the network's measured sensitivity to rounding, at float64)."""

    def __init__(self, model64, x64):
        self.model32 = copy.deepcopy(model64).float()
        self.model64 = copy.deepcopy(self.model32).double() if DTYPE is torch.float32 else model64
        self.x32 = x64.float()
        self.x64 = self.x32.double() if DTYPE is torch.float32 else x64

    def run(self, name=None, value=None):
        """The forward with parameter `name` replaced by `value` (float64)."""
        with torch.no_grad():
            o32 = {name: value.float()} if name else {}
            o64 = {name: value.float().double() if DTYPE is torch.float32 else value} if name else {}
            y32 = functional_call(self.model32, o32, (self.x32,)).double()
            y64 = functional_call(self.model64, o64, (self.x64,))
        finite = bool(torch.isfinite(y32).all() and torch.isfinite(y64).all())
        diff = (y32 - y64).abs().max().item() if finite else 0.0
        # Never below one unit roundoff of the largest output.
        last = (2.0 ** -24 if DTYPE is torch.float32 else 2.0 ** -53) * (y64.abs().max().item() if finite else 0.0)
        ymax = y64.abs().max().item() if finite else 0.0
        if DTYPE is torch.float32:
            return {"y": y32, "other": y64, "rounding": max(diff, last),
                    "rounding_other": max(diff * ROUNDOFF_RATIO, 2.0 ** -53 * ymax), "finite": finite}
        return {"y": y64, "other": y32, "rounding": max(diff * ROUNDOFF_RATIO, last),
                "rounding_other": max(diff, 2.0 ** -24 * ymax), "finite": finite}


def compare(a, b):
    """max |b - a| against the noise floor 8 (r_a + r_b); for float64, when the same difference taken
    in float32 is itself below float32's floor, at least 8 x 2^-29 x that difference (its rounding
    noise, conditioning included). Never a fixed tolerance."""
    floor = FLOOR_FACTOR * (a["rounding"] + b["rounding"])
    finite = a["finite"] and b["finite"]
    if finite and DTYPE is torch.float64:
        d32 = (b["other"] - a["other"]).abs().max().item()
        if d32 <= FLOOR_FACTOR * (a["rounding_other"] + b["rounding_other"]):
            floor = max(floor, FLOOR_FACTOR * ROUNDOFF_RATIO * d32)
    max_abs = (b["y"] - a["y"]).abs().max().item() if finite else None
    return {"max_abs_delta": max_abs, "noise_floor": floor,
            "above_floor": (not finite) or max_abs > floor}


class StructuralInputs:
    """Independent N(0, 1) inputs for the structural analysis, shared by all biases: the engine's
    own first K when the weights file has them (`structure_inputs`), else the analysed input
    first (as in the engine: the null basis is then accurate at the input the verdict moves the
    bias on); then drawn by torch."""

    def __init__(self, seed, given=None):
        self.generator = torch.Generator().manual_seed(seed)
        self.inputs = [] if given is None else [x.to(torch.float64) for x in given]

    def get(self, k):
        while len(self.inputs) <= k:
            self.inputs.append(torch.randn(BATCH, TOKENS, FEATURES, generator=self.generator, dtype=torch.float64))
        return self.inputs[k]


def per_token_response(model, owner, x, direction):
    """d(output) for a perturbation `direction` (B, T, n) added to `owner`'s output (where its bias
    enters), different for every token: the reference scale of a visible effect."""
    with fwAD.dual_level():
        delta = fwAD.make_dual(torch.zeros_like(direction), direction)
        handle = owner.register_forward_hook(lambda module, inputs, out: out + delta)
        try:
            tangent = fwAD.unpack_dual(model(x)).tangent
        finally:
            handle.remove()
    return torch.zeros(1, dtype=torch.float64) if tangent is None else tangent


def relus_after(model, owner):
    """The ReLU modules that run after `owner` (modules are registered in the order they run)."""
    modules = list(model.modules())
    at = next(i for i, mod in enumerate(modules) if mod is owner)
    return [mod for mod in modules[at + 1:] if isinstance(mod, nn.ReLU)]


def capture_inputs(modules):
    """Forward hooks that keep each module's last input; returns (store, remove)."""
    store = [None] * len(modules)
    handles = [mod.register_forward_hook(lambda module, inputs, out, i=i: store.__setitem__(i, inputs[0]))
               for i, mod in enumerate(modules)]
    return store, lambda: [h.remove() for h in handles]


def null_vanishes_before(model, name, relu, x, V):
    """Whether the tangent of every column of V (bias directions) is rounding at the input of
    `relu`: then the map up to there, analytic in the input, cancels them for every input."""
    bias = model.get_parameter(name).detach()
    store, remove = capture_inputs([relu])
    try:
        def at_relu(c):
            functional_call(model, {name: c}, (x,))
            return store[0].reshape(-1)
        J = jacobian(at_relu, bias, vectorize=True, strategy="forward-mode")  # (N*w, n)
    finally:
        remove()
    n = bias.numel()
    reference = J.norm().item() * math.sqrt(x.shape[0] * x.shape[1] / n)
    return bool((J @ V).norm(dim=0).max().item() <= VANISH_RTOL * reference) if V.shape[1] else True


def structure(model, name, inputs, max_samples, subspace=None):
    """The redundant dimension of bias `name`: the nullity of d(output)/d(bias) stacked over
    independent inputs until a stopping rule holds (one input can fake null directions: with few
    tokens a head sees only T-1 key differences). Only the triangular factor R of the stacked
    Jacobian is kept (R^T R = J^T J); singular values of R below STRUCTURE_RTOL x the reference
    scale are null. The rules, as in the engine: full rank ends the loop; without a ReLU on the
    way one input that adds no rank does (the Jacobian is analytic in the input); with one, a run
    of KINK_PATIENCE inputs (and twice the longest earlier run) that add no rank and activate no
    ReLU unit for the first time, unless the null directions vanish before the first ReLU. When
    max_samples runs out first the answer is undetermined: only bounds.

    With `subspace` = s < n (wide layers, where the full Jacobian is slow) only a random
    s-dimensional subspace P of the bias is analysed. Its nullity is generically max(0, s - rank),
    so the redundant dimension is exact when it exceeds n - s and otherwise only bounded by n - s."""
    bias = model.get_parameter(name).detach()
    owner = model.get_submodule(name.rsplit(".", 1)[0])
    n = bias.numel()
    generator = torch.Generator().manual_seed(SEED + 3)
    if subspace and subspace < n:
        P = torch.linalg.qr(torch.randn(n, subspace, generator=generator, dtype=torch.float64)).Q  # (n, s)
        at, to_bias = torch.zeros(subspace, dtype=torch.float64), lambda c: bias + P @ c
    else:
        P, at, to_bias = None, bias, lambda b: b
    m = at.numel()
    relus = relus_after(model, owner)
    active = [None] * len(relus)
    R, ranks, reference_sq = None, [], 0.0
    run = longest = 0
    vanishes, rule = None, "budget"
    for k in range(max_samples):
        x = inputs.get(k)
        J = jacobian(lambda c: functional_call(model, {name: to_bias(c)}, (x,)).reshape(-1), at,
                     vectorize=True, strategy="forward-mode")  # (B*T*F_out, m)
        store, remove = capture_inputs(relus)
        try:
            with torch.no_grad():
                model(x)
        finally:
            remove()
        new_units = False
        for i, seen in enumerate(store):
            now = (seen.reshape(-1, seen.shape[-1]) > 0).any(dim=0).long()
            if active[i] is not None and bool(((now > 0) & (active[i] == 0)).any()):
                new_units = True
            active[i] = now if active[i] is None else active[i] + now
        direction = torch.randn(BATCH, TOKENS, n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        reference_sq += per_token_response(model, owner, x, direction).pow(2).sum().item()
        R = torch.linalg.qr(J if R is None else torch.cat([R, J]), mode="r").R
        tau = STRUCTURE_RTOL * math.sqrt(reference_sq)
        sigma = torch.linalg.svdvals(R)
        ranks.append(int((sigma > tau).sum()))
        gained = ranks[-1] > (ranks[-2] if len(ranks) > 1 else 0)
        if ranks[-1] == m:
            rule = "full_rank"
            break
        if relus and not gained and vanishes is None and P is None:
            Vh = torch.linalg.svd(R, full_matrices=True)[2]
            vanishes = null_vanishes_before(model, name, relus[0], x, Vh[ranks[-1]:].T)
        kinked = bool(relus) and not vanishes
        if gained or (new_units and not vanishes):
            longest, run = max(longest, run), 0
        else:
            run += 1
        # The rarest unit some input activated sets how long a run must be to meet what only it passes.
        rarest = min([c.item() / (k + 1) for a in active for c in a if c > 0], default=1.0)
        needed = max(KINK_PATIENCE, 2 * longest, math.ceil(3 / rarest)) if kinked else 1
        if not gained and k + 1 >= MIN_SAMPLES and run >= needed:
            rule = "no_gain_kinked" if kinked else "no_gain"
            break
    rank = ranks[-1]
    _, sigma, Vh = torch.linalg.svd(R, full_matrices=True)
    reference = math.sqrt(reference_sq)
    kept, null = sigma[:rank], sigma[rank:]
    out = {"redundant_dim": m - rank, "redundant_dim_min": m - rank, "redundant_dim_max": m - rank,
           "null_basis": Vh[rank:].T, "samples": len(ranks), "rank_history": ranks, "stop_rule": rule,
           "null_sigma_max": (null.max().item() / reference) if len(null) and reference > 0 else 0.0,
           "kept_sigma_min": (kept.min().item() / reference) if rank and reference > 0 else 0.0}
    inactive = sum(int((a == 0).sum()) for a in active if a is not None)
    if rule == "budget":
        out.update({"redundant_dim": None, "redundant_dim_min": 0, "redundant_dim_max": m - rank})
    elif rule == "no_gain_kinked" and inactive and m - rank > 0 and P is None:
        # Units no input activated: dead (their directions are redundant) or rare (they are not).
        out.update({"redundant_dim": None, "redundant_dim_min": max(0, m - rank - inactive),
                    "redundant_dim_max": m - rank, "inactive_units": inactive})
    if P is not None:
        nullity = m - rank
        out["null_basis"] = P @ out["null_basis"]
        out["subspace"], out["subspace_nullity"] = m, nullity
        out["redundant_dim"] = n - m + nullity if nullity > 0 and rule != "budget" else None
        if out["redundant_dim"] is None:
            out["redundant_dim_at_most"] = n - m + nullity
    return out


def snap_null_basis(B):
    """B (n, k) with the all-ones direction put in exactly when it lies in span(B) (to 1e-6): a
    basis from computed Jacobians is only as accurate as their rounding (one token into a
    LayerNorm leaves it 1e-11 off), enough for a move along it to show above the floor."""
    n, k = B.shape
    ones = torch.ones(n, 1, dtype=B.dtype) / math.sqrt(n)
    if k == 0 or k == n or (ones - B @ (B.T @ ones)).norm().item() > 1e-6:
        return B
    rest = torch.linalg.svd(B - ones @ (ones.T @ B), full_matrices=False)[0][:, :k - 1]
    return torch.cat([ones, rest], dim=1)


def unit_rms(v):
    """v scaled to RMS 1 per entry (so "size s" means entries of about s)."""
    return v * (math.sqrt(v.numel()) / v.norm())


def verdict_for(k, n):
    return "redundant" if k == n else "effective" if k == 0 else "partly_redundant"


def analyse_biases(model, evaluator, max_samples, given_inputs=None, subspace=None):
    """Per bias: structural redundant dimension, a random perturbation of RMS 1 per entry against
    the noise floor, and the verdict (a full perturbation below the floor: redundant; else, with
    0 < k < n null directions, a perturbation inside the null space decides partly_redundant)."""
    rows = []
    base = evaluator.run()
    inputs = StructuralInputs(SEED + 1, given_inputs if given_inputs is not None else [evaluator.x64])
    generator = torch.Generator().manual_seed(SEED + 2)
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            continue
        n = p.numel()
        st = structure(model, name, inputs, max_samples, subspace)
        k = st["redundant_dim"]
        undetermined = st["redundant_dim"] is None and "subspace" not in st
        u = unit_rms(torch.randn(n, generator=generator, dtype=torch.float64))
        full = compare(base, evaluator.run(name, p.detach() + u))
        row = {"param": name, "size": n, "redundant_dim": k,
               "redundant_dim_min": st["redundant_dim_min"], "redundant_dim_max": st["redundant_dim_max"]}
        parts = {}
        if undetermined:
            verdict = "undetermined"
        elif not full["above_floor"]:
            verdict = "redundant"
        elif k is not None and 0 < k < n:
            B = snap_null_basis(st["null_basis"])
            g = torch.randn(B.shape[1], generator=generator, dtype=torch.float64)
            u = unit_rms(B @ g)
            # Both signs: an inactive ReLU unit cancels a push down but not a push up.
            plus = compare(base, evaluator.run(name, p.detach() + u))
            minus = compare(base, evaluator.run(name, p.detach() - u))
            # The same rounding measured twice: both moves take the larger floor.
            floor = max(plus["noise_floor"], minus["noise_floor"])
            for d in (plus, minus):
                d["noise_floor"] = floor
                d["above_floor"] = d["max_abs_delta"] is None or d["max_abs_delta"] > floor
            inside = plus if plus["above_floor"] or not minus["above_floor"] else minus
            parts["redundant_part"] = {key: inside[key] for key in ("max_abs_delta", "noise_floor")}
            verdict = "effective" if inside["above_floor"] else "partly_redundant"
        else:
            verdict = "effective"
        if not undetermined and st["stop_rule"] == "no_gain_kinked" and k and verdict == "effective":
            shown = parts["redundant_part"] if parts else full
            moved = float("inf") if shown["max_abs_delta"] is None else shown["max_abs_delta"]
            # As in the engine: a finite move acts along null directions that a ReLU's stopping rule
            # left, so inputs the sample did not reach may act along them too; only bounds hold.
            undetermined, verdict = True, "undetermined"
            row.update({"redundant_dim": None, "redundant_dim_min": 0, "redundant_dim_max": k})
            kinked_note = (f"a finite move along the {k} null direction{'' if k == 1 else 's'} found over "
                           f"{st['samples']} inputs changes the output (max |delta| {moved:.3g} "
                           f"against a floor of {shown['noise_floor']:.3g}); a ReLU lies on the way, so inputs the "
                           f"sample did not reach may act along them: the rank found, {n - k} of {n}, is certain, "
                           f"the rest is not")
            st["kinked_note"] = kinked_note
        row["verdict"] = verdict
        row["max_abs_delta"] = full["max_abs_delta"]
        row["noise_floor"] = full["noise_floor"]
        if undetermined:
            row["consistent"] = None
            row["undetermined_reason"] = st["kinked_note"] if "kinked_note" in st else (
                f"{st['inactive_units']} ReLU unit(s) were never active: dead or only rarely active, which sampling "
                f"cannot tell apart" if "inactive_units" in st else
                f"{max_samples} inputs (--max-samples) ran out before a stopping rule held: "
                f"the rank found, {n - st['redundant_dim_max']} of {n}, is a lower bound")
        elif k is None:  # only bounded by the subspace check: the verdict takes it as 0
            row["redundant_dim_at_most"] = st["redundant_dim_at_most"]
            row["consistent"] = None
        else:
            row["consistent"] = verdict == verdict_for(k, n)
        if parts:
            row["parts"] = parts
        row["structure"] = {key: st[key] for key in ("samples", "rank_history", "stop_rule", "null_sigma_max",
                                                     "kept_sigma_min", "subspace", "subspace_nullity") if key in st}
        rows.append(row)
    return rows


def analyse_folds(model, evaluator):
    """Each fold on a copy of the float64 model, compared with the original against the floor."""
    rows = []
    base = evaluator.run()
    for rule, where, apply in FOLDS:
        folded = copy.deepcopy(model)
        with torch.no_grad():
            apply(folded)
        d = compare(base, Evaluator(folded, evaluator.x64).run())
        rows.append({"rule": rule, "where": where, "exact": not d["above_floor"],
                     "max_abs_delta": d["max_abs_delta"], "noise_floor": d["noise_floor"]})
    return rows


def forward_check(model, x, output):
    """The float64 forward against the engine's output (float64, on the same stored values)."""
    with torch.no_grad():
        y = model(x)
    diff = (y - output.to(torch.float64)).abs().max().item()
    scale = output.abs().max().item()
    return {"max_abs_diff": diff, "max_abs_output": scale, "rel_diff": diff / scale if scale > 0 else diff}


def fmt(v):
    return "n/a" if v is None else f"{v:.2e}"


def print_table(report):
    print(f"{TITLE} in PyTorch {torch.__version__} ({report['config']['dtype']}, {report['source']})")
    if "forward_check" in report:
        fc = report["forward_check"]
        print(f"float64 forward vs the engine's output: max |diff| {fmt(fc['max_abs_diff'])} "
              f"(relative {fmt(fc['rel_diff'])})")
    print(f"\n{'bias':<36} {'size':>6} {'redundant':>14}  {'verdict':<17} {'max |delta|':>11} {'noise floor':>11}")
    for b in report["biases"]:
        k = b["redundant_dim"]
        if k is not None:
            red = f"{k} of {b['size']}"
        elif b["verdict"] == "undetermined":
            red = f"{b['redundant_dim_min']}-{b['redundant_dim_max']} of {b['size']}"
        else:
            red = f"<={b['redundant_dim_at_most']} of {b['size']}"
        print(f"{b['param']:<36} {b['size']:>6} {red:>14}  {b['verdict']:<17} {fmt(b['max_abs_delta']):>11} {fmt(b['noise_floor']):>11}")
    if report["folds"]:
        print(f"\n{'fold':<28} {'where':<36} {'exact':<6} {'max |delta|':>11} {'noise floor':>11}")
        for f in report["folds"]:
            print(f"{f['rule']:<28} {', '.join(f['where']):<36} {'yes' if f['exact'] else 'NO':<6} "
                  f"{fmt(f['max_abs_delta']):>11} {fmt(f['noise_floor']):>11}")
    t = report["timing_ms"]
    print(f"\nanalysis {t['total']:.0f} ms (biases {t['biases']:.0f} ms, folds {t['folds']:.0f} ms)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=TITLE + ": biaslab's analysis in PyTorch.")
    parser.add_argument("weights", nargs="?", help="a .safetensors file from `biaslab export-torch --weights` "
                        "(parameters, buffers, input and the engine's output); without it, torch draws them")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--max-samples", type=int, default=4096,
                        help="most inputs stacked per bias in the structural analysis (default 4096); a bias "
                        "whose stopping rule has not held by then is undetermined, with bounds")
    parser.add_argument("--structure-subspace", type=int, metavar="S",
                        help="for biases wider than S, analyse only a random S-dimensional subspace "
                        "(fast for wide layers; the redundant dimension is then exact only above n - S)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = build_model().double()
    output = given_inputs = None
    if args.weights:
        tensors = read_safetensors(args.weights)
        x = load_experiment(model, tensors, args.weights)
        output = tensors.get("output")
        given_inputs = tensors.get("structure_inputs")
        source = "weights and input from " + args.weights
    else:
        x = draw_experiment(model, SEED)
        source = f"weights and input drawn by torch, seed {SEED}"
    x = round_to_dtype(model, x)
    for p in model.parameters():
        p.requires_grad_(False)

    start = time.perf_counter()
    evaluator = Evaluator(model, x)
    base = evaluator.run()
    biases = analyse_biases(model, evaluator, args.max_samples, given_inputs, args.structure_subspace)
    after_biases = time.perf_counter()
    folds = analyse_folds(model, evaluator)
    end = time.perf_counter()

    report = {"ok": True, "format": 1, "source": source, "torch_version": torch.__version__,
              "config": CONFIG,
              "noise": {"dtype": CONFIG.get("dtype", "float64"), "output_rounding": base["rounding"],
                        "output_max_abs": base["y"].abs().max().item()},
              "biases": biases, "folds": folds,
              "timing_ms": {"biases": 1e3 * (after_biases - start), "folds": 1e3 * (end - after_biases),
                            "total": 1e3 * (end - start)}}
    if output is not None:
        report["forward_check"] = forward_check(evaluator.model64, evaluator.x64, output)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
)PY";

// ---------------------------------------------------------------------------------------------
// Generated parts
// ---------------------------------------------------------------------------------------------

// The shortest decimal that reads back as the same double (Python parses it identically).
std::string py_float(double v) {
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

const char* py_bool(bool b) { return b ? "True" : "False"; }

// Compact JSON with spaces after separators and "type" first, as people write configs.
std::string config_text(const Json& j) {
  if (j.is_object()) {
    std::string s = "{";
    auto add = [&](const std::string& k, const Json& v) {
      s += (s.size() > 1 ? ", " : "") + Json(k).dump() + ": " + config_text(v);
    };
    if (j.contains("type")) add("type", j["type"]);
    for (const auto& item : j.items())
      if (item.key() != "type") add(item.key(), item.value());
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (const auto& v : j) s += (s.size() > 1 ? ", " : "") + config_text(v);
    return s + "]";
  }
  return j.dump();
}

// The config with one top-level layer per line.
std::string config_lines(const ExperimentConfig& config) {
  const Json j = config_to_json(config);
  std::string s = "{";
  for (const auto& item : j.items())
    if (item.key() != "layers") s += (s.size() > 1 ? ", " : "") + Json(item.key()).dump() + ": " + config_text(item.value());
  s += ",\n \"layers\": [";
  const auto& layers = j["layers"];
  for (size_t i = 0; i < layers.size(); ++i) s += std::string(i ? "," : "") + "\n   " + config_text(layers[i]);
  return s + "]}";
}

struct Needs {
  bool attention = false, rmsnorm = false, ln_without_bias = false, batchnorm = false,
       groupnorm = false, instancenorm = false, residual = false;
};

void scan(const std::vector<LayerConfig>& layers, Needs& n) {
  for (const auto& l : layers) {
    switch (l.type) {
      case LayerType::attention: n.attention = true; break;
      case LayerType::rmsnorm: n.rmsnorm = true; break;
      case LayerType::layernorm: n.ln_without_bias |= l.elementwise_affine && !l.bias; break;
      case LayerType::batchnorm: n.batchnorm = true; break;
      case LayerType::groupnorm: n.groupnorm = true; break;
      case LayerType::instancenorm: n.instancenorm = true; break;
      case LayerType::residual:
        n.residual = true;
        scan(l.body, n);
        break;
      default: break;
    }
  }
}

// One layer's constructor expression; residual bodies are written out nested.
void emit_layers(const std::vector<LayerNode>& nodes, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  for (const LayerNode& node : nodes) {
    const LayerConfig& c = node.cfg;
    const std::string F = std::to_string(node.in_width);
    const std::string eps = py_float(c.eps);
    std::string e;
    switch (c.type) {
      case LayerType::linear:
        e = "nn.Linear(" + F + ", " + std::to_string(node.out_width) + ", bias=" + py_bool(c.bias) + ")";
        break;
      case LayerType::layernorm:
        if (c.elementwise_affine && !c.bias) e = "layer_norm_without_bias(" + F + ", eps=" + eps + ")";
        else e = "nn.LayerNorm(" + F + ", eps=" + eps + (c.elementwise_affine ? "" : ", elementwise_affine=False") + ")";
        break;
      case LayerType::rmsnorm:
        e = "RMSNorm(" + F + ", eps=" + eps + ", elementwise_affine=" + py_bool(c.elementwise_affine) + ")";
        break;
      case LayerType::batchnorm:
        e = "batch_norm(" + F + ", eps=" + eps + ", affine=" + py_bool(c.affine) + ", mode=\"" +
            (c.mode == BatchNormMode::train ? "train" : "eval") + "\")";
        break;
      case LayerType::groupnorm:
        e = "GroupNorm(" + std::to_string(c.num_groups) + ", " + F + ", eps=" + eps + ", affine=" + py_bool(c.affine) + ")";
        break;
      case LayerType::instancenorm:
        e = "InstanceNorm1d(" + F + ", eps=" + eps + ", affine=" + py_bool(c.affine) + ")";
        break;
      case LayerType::attention:
        e = "Attention(" + F + ", num_heads=" + std::to_string(c.num_heads) + ", q_bias=" + py_bool(c.q_bias) +
            ", k_bias=" + py_bool(c.k_bias) + ", v_bias=" + py_bool(c.v_bias) + ", o_bias=" + py_bool(c.o_bias) +
            ", causal=" + py_bool(c.causal) + ", rope=" + py_bool(c.rope) + ")";
        break;
      case LayerType::relu: e = "nn.ReLU()"; break;
      case LayerType::gelu:
        e = std::string("nn.GELU(approximate=\"") + (c.approximate == GeluApprox::tanh ? "tanh" : "none") + "\")";
        break;
      case LayerType::softmax: e = "nn.Softmax(dim=-1)"; break;
      case LayerType::residual:
        out += pad + "Residual([\n";
        emit_layers(node.body, indent + 4, out);
        out += pad + "]),\n";
        continue;
    }
    out += pad + e + ",\n";
  }
}

// Python expression of the sequence a fold site lives in: model.layers[0].body
std::string seq_expr(const FoldSite& site) {
  std::string s = "m.layers";
  for (int i : site.path) s += "[" + std::to_string(i) + "].body";
  return s;
}

const LayerNode& node_at(const Network& net, const FoldSite& site, int index) {
  const std::vector<LayerNode>* seq = &net.layers;
  for (int i : site.path) seq = &(*seq)[i].body;
  return (*seq)[index];
}

std::string script(const ExperimentConfig& config, const TorchExportOptions& options) {
  Network net = build_network(config);
  sync_network(net);
  Needs needs;
  scan(config.layers, needs);
  const auto folds = find_folds(net);
  std::set<std::string> rules;
  for (const auto& f : folds) rules.insert(f.rule->id);
  const bool uses_feeder = rules.count("drop_bias_before_norm") || rules.count("centre_bias_before_norm");
  if (rules.count("layernorm_to_rmsnorm")) needs.rmsnorm = true;

  const std::string title = options.title.empty() ? "A biaslab experiment" : options.title;
  const Shape& s = config.shape;
  std::string out;
  out += "#!/usr/bin/env python3\n";
  out += "\"\"\"" + title + ": a biaslab experiment as a standalone PyTorch script.\n\n";
  out += "Exported by biaslab " + std::string(BIASLAB_VERSION) + " (`biaslab export-torch`); needs only torch and numpy.\n\n";
  out += "    python3 experiment.py WEIGHTS.safetensors   # the engine's exact weights and input\n";
  out += "    python3 experiment.py                       # weights and input drawn by torch (seed " +
         std::to_string(config.seed) + ")\n";
  out += "    python3 experiment.py ... --json            # the report as JSON (biaslab report format 1)\n\n";
  out += R"(The layer stack is built from torch.nn modules; its state dict keys are the engine's
parameter names. The script recomputes, per bias, the structural redundant dimension (the nullity
of d(output)/d(bias) from torch.autograd.functional.jacobian, stacked over independent inputs
until its rank stops growing), what a random perturbation of RMS 1 per entry does to the output
against a noise floor measured from the same forward in float32 and float64, and the verdict;
then checks every exact fold that applies against the same floor.
""")" "\n";
  out += kImports;
  out += "\n# The experiment (biaslab config format 1).\nCONFIG = json.loads(r\"\"\"\n" + config_lines(config) + "\n\"\"\")\n";
  out += "TITLE = " + Json(title).dump() + "\n";
  out += "SEED = " + std::to_string(config.seed) + "\n";
  out += std::string("DTYPE = torch.") + dtype_name(config.dtype) + "\n";
  out += "BATCH, TOKENS, FEATURES = " + std::to_string(s.batch) + ", " + std::to_string(s.tokens) + ", " +
         std::to_string(s.features) + "\n";
  out += "\n\n# =============================================================================================\n"
         "# Layers\n"
         "# =============================================================================================";
  if (needs.attention) out += kAttention;
  if (needs.rmsnorm) out += kRmsNorm;
  if (needs.ln_without_bias) out += kLayerNormWithoutBias;
  if (needs.batchnorm || needs.groupnorm || needs.instancenorm) out += kFeaturesLast;
  if (needs.batchnorm) {
    out += s.batch * s.tokens == 1 ? kBatchNormClassOneValue : kBatchNormClass;
    out += kBatchNorm;
  }
  if (needs.groupnorm) out += kGroupNorm;
  if (needs.instancenorm) out += s.tokens == 1 ? kInstanceNormOneToken : kInstanceNorm;
  if (needs.residual) out += kResidual;
  out += kNet;
  out += "\n\ndef build_model():\n    return Net([\n";
  emit_layers(net.layers, 8, out);
  out += "    ])\n";

  if (!folds.empty()) {
    out += kFoldBanner;
    const bool sets_biases = rules.size() > rules.count("drop_key_bias") + rules.count("drop_bias_before_norm") +
                                                rules.count("centre_bias_before_norm") + rules.count("layernorm_to_rmsnorm");
    if (sets_biases) out += kFoldCommon;
    if (uses_feeder) out += kFoldFeeder;
    if (rules.count("fold_layernorm_affine") || rules.count("fold_rmsnorm_gain")) out += kFoldNormAffine;
    if (rules.count("fuse_linear_batchnorm_eval") || rules.count("fuse_batchnorm_eval_linear")) out += kFoldBatchNorm;
    if (rules.count("fuse_linear_batchnorm_eval")) out += kFoldLinearBn;
    if (rules.count("fuse_batchnorm_eval_linear")) out += kFoldBnLinear;
    if (rules.count("drop_key_bias")) out += kFoldKeyBias;
    if (rules.count("fold_value_bias")) out += kFoldValueBias;
    if (rules.count("drop_bias_before_norm")) out += kFoldDropBeforeNorm;
    if (rules.count("centre_bias_before_norm")) out += kFoldCentre;
    if (rules.count("merge_linear_linear")) out += kFoldLinearLinear;
    if (rules.count("layernorm_to_rmsnorm")) out += kFoldLnToRms;
  }
  out += "\n\n# The folds that apply to this stack: (rule, layers, rewrite of a model copy `m`).\nFOLDS = [\n";
  for (const auto& f : folds) {
    FoldApplied applied;
    apply_fold(net, f, applied);  // for the layer names only
    std::string where;
    for (const auto& l : applied.layers) where += (where.empty() ? "" : ", ") + Json(l).dump();
    std::string fn = f.rule->id;
    if (fn == "fold_layernorm_affine" || fn == "fold_rmsnorm_gain") fn = "fold_norm_affine";
    std::string args = seq_expr(f.site) + ", " + std::to_string(f.site.index);
    if (fn == "centre_bias_before_norm") {
      const LayerNode& norm = node_at(net, f.site, f.site.index + 1);
      args += ", groups=" + std::to_string(norm.cfg.type == LayerType::groupnorm ? norm.cfg.num_groups : 1);
    }
    out += "    (\"" + std::string(f.rule->id) + "\", [" + where + "], lambda m: " + fn + "(" + args + ")),\n";
  }
  out += "]\n";
  out += kIo;
  out += kAnalysis;
  return out;
}

}  // namespace

std::string export_torch_script(const ExperimentConfig& config, const TorchExportOptions& options) {
  try {
    return script(config, options);
  } catch (const std::exception&) {
    return std::string();
  }
}

Mat reference_output(const Network& net, const Mat& input) {
  const Model m = compile(net);
  Weights<double> w = cast_weights<double>(m);
  Mat x = input;
  if (m.dtype == DType::float32) {
    for (auto& p : w) p = p.cast<float>().cast<double>();
    x = input.cast<float>().cast<double>();
  }
  return forward<double>(m, w, x);
}

namespace {

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) | static_cast<unsigned char>(bytes[i + 2]);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += k[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace

Json export_torch_bundle(const std::string& config_text, const std::string& title) {
  using json = Json;
  auto error = [](const std::string& path, const std::string& message) {
    return json{{"ok", false}, {"error", {{"path", path}, {"message", message}}}};
  };
  try {
    const auto cfg = parse_config_text(config_text);
    if (!cfg) return error(cfg.error().path, cfg.error().message);
    ExperimentTensors tensors;
    tensors.net = build_network(*cfg);
    sync_network(tensors.net);
    tensors.input = draw_input(*cfg, 0);
    tensors.output = reference_output(tensors.net, tensors.input);
    const auto bytes = write_experiment_tensors(tensors);
    if (!bytes) return error(bytes.error().path, bytes.error().message);
    const std::string script = export_torch_script(*cfg, {title});
    if (script.empty()) return error("", "out of memory while writing the script");
    return {{"ok", true}, {"script", script}, {"weights_base64", base64(*bytes)}};
  } catch (const std::exception& e) {
    return error("", std::string("internal error: ") + e.what());
  }
}

}  // namespace biaslab
