#!/usr/bin/python3
"""Degenerate stacks: the engine's redundant dimensions and verdicts against an independent float64
torch reference (issue 8).

Seeded random stacks in families that are known to be hard for the engine's structural method:
  norm1    batch x tokens = 1 into every kind of norm, small widths
  attn2    2 tokens (sometimes 3) into one wide attention head (32..128 features), causal or not
  relu     ReLU / GELU MLPs on 1-3 tokens (one or two hidden layers of 16..64)
  narrow   widths of 1-2 features, random layers
  eps      norms with a large eps (0.1 up to the schema's maximum)
  softmax  chains linear -> softmax -> linear -> softmax
  mixed    residual blocks with a norm and a small attention, small sizes

For every stack it runs `biaslab analyze --format json --no-sweep --no-invariances` and
`biaslab export-torch --weights`, and takes ONLY the model definition (`build_model`) and the
engine's exact weights (`read_safetensors`, `load_experiment`) from the exported script. The
reference is computed here: for every bias (every parameter whose name ends in "bias": Linear and
q/k/v/o biases and norm shifts), the float64 Jacobian of the whole output with respect to the bias
(functorch.jacfwd, or jacrev when the output is smaller than the bias, vmapped over the inputs), at
2n + 32 independent standard-normal inputs of shape (batch, tokens, features) for a bias of size n
(no early stopping), stacked, reduced by QR chunk by chunk, and ranked by its singular values.
A singular value counts when it exceeds REL_RANK of the scale; the scale is the largest of: the
largest singular value, the response to a random per-token perturbation of the tensor the bias is
added to (the same kind of reference as the engine's), and SCALE_FLOOR of the largest such response
in the stack (so an all-zero Jacobian is recognised as zero). A row with a singular value inside
AMBIGUOUS (relative), or whose reference rank still rose between the first half of its inputs and
all of them (so that the reference itself may not have converged), is left out of the pass/fail
count and reported as ambiguous. Where the engine finds more rank than the reference (a smaller
redundant_dim), the reference is computed again with 4, 16, then 64 times as many fresh inputs, since
a ReLU unit that standard-normal inputs seldom reach (one in 300, say) can hide from 2n + 32 of them.

Per row it checks
  (a) redundant_dim == the reference nullity; a row with verdict "undetermined", redundant_dim null
      and integer bounds redundant_dim_min/max passes when the reference lies within them (counted
      and reported separately);
  (b) self-consistency: "effective" with 0 < redundant_dim, or "redundant" with redundant_dim < size,
      fails unless the row carries "consistent": false with a note (then it is reported as flagged
      inconsistent, not failed);
  (c) folds: a bias that an exact fold moves or drops, with 0 < redundant_dim < size, must be
      "partly_redundant", never "effective" -- when the fold accounts for all its null directions
      (see fold_accounts_for: a LayerNorm centring explains one direction, not a second one that
      only a ReLU unit no input reaches makes null at first order).
A stack fails when any of its rows fails (or the engine crashes, or the bias lists differ, or the
torch forward does not reproduce the engine's output).

    /usr/bin/python3 tests/torch/degenerate.py [--biaslab build/biaslab] [--count 300] [--seed 1]
        [--family relu --family attn2] [--jobs 1] [--keep DIR] [--case relu:1000007] [--verbose]
    /usr/bin/python3 tests/torch/degenerate.py --config tests/torch/cases/*.json   # the saved cases

A failure line names the family and the case seed; `--case FAMILY:SEED` runs that stack again.
Cost: the reference grows like width^4 for an attention head (2 width + 32 inputs), so attn2 takes
most of the time (a few seconds for a 96-wide head); every other stack takes well under a second.
Exit status 0: no failures; 1: failures; 77: torch is not importable (skipped).
"""
import argparse
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import types
import warnings

REL_RANK = 1e-9            # singular value / scale above this: counted in the rank
AMBIGUOUS = (1e-12, 1e-7)  # singular value / scale inside this band: the row is ambiguous
SCALE_FLOOR = 1e-4         # the scale is at least this fraction of the stack's largest response
CHUNK_ELEMENTS = 1 << 21   # about how many numbers one vectorised Jacobian pass holds per tensor
ESCALATE = (4, 16, 64)    # where the engine finds more rank: the reference again with 4x, 16x, then 64x the inputs
ENGINE_TIMEOUT = 300
FORWARD_RTOL = 1e-8

FAMILIES = ["norm1", "attn2", "relu", "narrow", "eps", "softmax", "mixed"]
NORMS = ["layernorm", "rmsnorm", "groupnorm", "instancenorm", "batchnorm_train", "batchnorm_eval"]


# =============================================================================================
# Stack generators: one function per family, rng -> config (format v1)
# =============================================================================================
class Gen:
    def __init__(self, seed, eps_max):
        self.rng = random.Random(seed)
        self.eps_max = eps_max  # {layer type: the schema's largest eps}

    def dtype(self):
        return "float32" if self.rng.random() < 0.25 else "float64"

    def config(self, shape, layers):
        return {"version": 1, "seed": self.rng.randint(0, 10 ** 6), "dtype": self.dtype(),
                "shape": dict(zip(("batch", "tokens", "features"), shape)), "layers": layers}

    def divisor(self, width):
        return self.rng.choice([d for d in range(1, width + 1) if width % d == 0])

    def eps_value(self, kind):
        """Log-uniform in 0.1 .. 10, clipped to what the engine's schema accepts."""
        value = 10 ** self.rng.uniform(-1, 1)
        return round(min(value, self.eps_max.get(kind, value)), 4)

    def norm(self, kind, width, large_eps=False):
        rng = self.rng
        if kind in ("batchnorm_train", "batchnorm_eval"):
            layer = {"type": "batchnorm", "mode": kind.split("_")[1]}
        else:
            layer = {"type": kind}
        base = layer["type"]
        if base == "layernorm":
            layer["elementwise_affine"] = rng.random() < 0.8
            layer["bias"] = rng.random() < 0.8
        elif base == "rmsnorm":
            layer["elementwise_affine"] = rng.random() < 0.8
        elif base == "groupnorm":
            layer["num_groups"] = self.divisor(width)
            layer["affine"] = rng.random() < 0.8
        elif base == "instancenorm":
            layer["affine"] = rng.random() < 0.6
        elif base == "batchnorm":
            layer["affine"] = rng.random() < 0.8
        if large_eps or rng.random() < 0.15:
            layer["eps"] = self.eps_value(base) if large_eps else 0.1
        return layer

    def linear(self, out=None, bias=None):
        layer = {"type": "linear"}
        if out is not None:
            layer["out_features"] = out
        layer["bias"] = (self.rng.random() < 0.9) if bias is None else bias
        return layer

    def act(self, relu_share=0.5):
        if self.rng.random() < relu_share:
            return {"type": "relu"}
        return {"type": "gelu", "approximate": self.rng.choice(["none", "tanh"])}

    # ---- families -------------------------------------------------------------------------
    def norm1(self):
        """batch x tokens = 1 into a norm, small widths (cause 1: an inaccurate null basis)."""
        rng = self.rng
        width = rng.choice([1, 2, 2, 3, 4, 4, 5, 6, 8])
        layers, w = [], width
        if rng.random() < 0.85:
            w = rng.choice([width, width, rng.randint(1, 8)])
            layers.append(self.linear(None if w == width else w, bias=True))
        layers.append(self.norm(rng.choice(NORMS), w))
        if rng.random() < 0.2:  # a second norm right after
            layers += [self.linear(bias=True), self.norm(rng.choice(NORMS), w)]
        if rng.random() < 0.6:
            layers.append(self.linear(rng.randint(1, 8)))
        return self.config((1, 1, width), layers)

    def attn2(self):
        """2 tokens into one wide head (cause 2: rank still rising at the input cap)."""
        rng = self.rng
        # The reference costs about width^4 (2 width + 32 inputs, each a width x width Jacobian
        # through width x width projections): 128 is three times 96, so it is drawn less often.
        # Above 64 (one sequence of 2 tokens) the rank of b_Q still rises at the engine's input cap.
        width = rng.choice([32, 48, 64, 64, 72, 80, 96, 96, 128])
        tokens = 2 if rng.random() < 0.85 else 3
        batch = 1 if rng.random() < 0.85 else 2
        rope = rng.random() < 0.15
        attn = {"type": "attention", "num_heads": 1, "q_bias": True, "k_bias": True, "v_bias": True,
                "o_bias": True, "causal": rng.random() < 0.5, "rope": rope}
        layers = []
        if rng.random() < 0.25:
            layers.append({"type": "layernorm"})
        layers.append({"type": "residual", "body": [attn]} if rng.random() < 0.3 else attn)
        if rng.random() < 0.3:
            layers.append(self.linear(rng.choice([4, 8, 16])))
        return self.config((batch, tokens, width), layers)

    def relu(self):
        """ReLU / GELU on 1-3 tokens (cause 3: a unit active with probability 1/2 per input)."""
        rng = self.rng
        width = rng.choice([2, 4, 6, 8, 12, 16])
        tokens = rng.choice([1, 1, 1, 2, 3])
        batch = 1 if rng.random() < 0.75 else 2
        layers = [self.linear(rng.choice(range(16, 65, 8)), bias=True), self.act(0.7)]
        if rng.random() < 0.35:
            layers += [self.linear(rng.choice(range(8, 33, 8)), bias=True), self.act(0.7)]
        layers.append(self.linear(rng.choice([1, 2, 4, 8, width])))
        return self.config((batch, tokens, width), layers)

    def narrow(self):
        """Widths of 1-2 features through random layers."""
        rng = self.rng
        width = rng.choice([1, 2])
        start = width
        tokens, batch = rng.randint(1, 4), rng.randint(1, 2)
        layers = []
        for _ in range(rng.randint(2, 4)):
            kind = rng.choice(["linear", "linear", "norm", "norm", "act", "softmax", "attention"])
            if kind == "linear":
                out = rng.choice([1, 2])
                layers.append(self.linear(out))
                width = out
            elif kind == "norm":
                layers.append(self.norm(rng.choice(NORMS), width))
            elif kind == "act":
                layers.append(self.act())
            elif kind == "softmax":
                layers.append({"type": "softmax"})
            else:
                layers.append({"type": "attention", "num_heads": self.divisor(width),
                               "causal": rng.random() < 0.4})
        if not any(l["type"] == "linear" or (l["type"] == "attention") for l in layers):
            layers.insert(0, self.linear(width))
        return self.config((batch, tokens, start), layers)

    def large_eps(self):
        """Norms with a large eps."""
        rng = self.rng
        width = rng.choice([2, 3, 4, 6, 8])
        tokens, batch = rng.randint(1, 4), rng.randint(1, 2)
        layers = [self.linear(bias=True), self.norm(rng.choice(NORMS), width, large_eps=True)]
        if rng.random() < 0.3:
            layers += [self.linear(bias=True), self.norm(rng.choice(NORMS), width, large_eps=True)]
        if rng.random() < 0.6:
            layers.append(self.linear(rng.randint(1, 6)))
        return self.config((batch, tokens, width), layers)

    def softmax(self):
        """Chains of softmaxes."""
        rng = self.rng
        width = rng.randint(2, 12)
        tokens, batch = rng.randint(1, 4), rng.randint(1, 2)
        layers = []
        for _ in range(rng.randint(2, 3)):
            layers += [self.linear(rng.randint(2, 12), bias=True), {"type": "softmax"}]
        if rng.random() < 0.5:
            layers.append(self.linear(rng.randint(1, 8)))
        return self.config((batch, tokens, width), layers)

    def mixed(self):
        """Residual blocks with a norm and a small attention, small sizes."""
        rng = self.rng
        heads = rng.choice([1, 1, 2])
        width = heads * rng.choice([2, 4, 6, 8])
        tokens, batch = rng.randint(1, 4), rng.randint(1, 2)
        layers = []
        for _ in range(rng.randint(1, 2)):
            norm = self.norm(rng.choice(["layernorm", "layernorm", "rmsnorm", "groupnorm"]), width)
            attn = {"type": "attention", "num_heads": heads, "causal": rng.random() < 0.4,
                    "rope": (width // heads) % 2 == 0 and rng.random() < 0.25}
            for b in ("q_bias", "k_bias", "v_bias", "o_bias"):
                attn[b] = rng.random() < 0.85
            if rng.random() < 0.5:  # pre-norm
                layers.append({"type": "residual", "body": [norm, attn]})
            else:                   # post-norm
                layers += [{"type": "residual", "body": [attn]}, norm]
            if rng.random() < 0.6:
                hidden = rng.choice([width, 2 * width])
                ffn = [self.linear(hidden, bias=True), self.act(), self.linear(width, bias=True)]
                if rng.random() < 0.5:
                    layers.append({"type": "residual", "body": [self.norm("layernorm", width)] + ffn})
                else:
                    layers += [{"type": "residual", "body": ffn}, self.norm(rng.choice(["layernorm", "rmsnorm"]), width)]
        if rng.random() < 0.4:
            layers.append(self.linear(rng.randint(1, 6)))
        return self.config((batch, tokens, width), layers)


def make_config(family, case_seed, eps_max):
    gen = Gen(case_seed, eps_max)
    return (gen.large_eps if family == "eps" else getattr(gen, family))()


# =============================================================================================
# The reference (runs in the worker; torch is imported there)
# =============================================================================================
torch = nn = functorch = functional_call = fwAD = None


def import_torch():
    global torch, nn, functorch, functional_call, fwAD
    import functorch as _functorch
    import torch as _torch
    from torch import nn as _nn
    from torch.nn.utils.stateless import functional_call as _functional_call
    import torch.autograd.forward_ad as _fwAD
    torch, nn, functorch, functional_call, fwAD = _torch, _nn, _functorch, _functional_call, _fwAD
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")


def load_exported(script, weights):
    """The exported experiment's model with the engine's exact weights (float64), and its output."""
    name = "biaslab_export_" + os.path.basename(script).replace(".", "_").replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model().double()
    tensors = module.read_safetensors(weights)
    x = module.load_experiment(model, tensors, weights)
    for p in model.parameters():
        p.requires_grad_(False)
    output = tensors.get("output")
    return model, x, None if output is None else output.to(torch.float64)


def patch_single_element_norms(model, batch, tokens):
    """torch refuses BatchNorm (train), InstanceNorm and GroupNorm statistics over one element;
    the engine accepts them (the centred value is 0). Those modules get the textbook formula."""
    patched = []
    for name, m in model.named_modules():
        bn = isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training and batch * tokens == 1
        inorm = isinstance(m, nn.modules.instancenorm._InstanceNorm) and tokens == 1
        gn = isinstance(m, nn.GroupNorm) and tokens * (m.num_channels // m.num_groups) == 1
        if not (bn or inorm or gn):
            continue
        dims = (0, 1) if bn else (1,)

        def forward(self, x, dims=dims, gn=gn):  # x: (B, T, F)
            if gn:
                B, T, F = x.shape
                g = x.reshape(B, T, self.num_groups, F // self.num_groups)
                mu = g.mean(dim=(1, 3), keepdim=True)
                var = ((g - mu) ** 2).mean(dim=(1, 3), keepdim=True)
                y = ((g - mu) / torch.sqrt(var + self.eps)).reshape(B, T, F)
            else:
                mu = x.mean(dim=dims, keepdim=True)
                var = ((x - mu) ** 2).mean(dim=dims, keepdim=True)
                y = (x - mu) / torch.sqrt(var + self.eps)
            if getattr(self, "weight", None) is not None:
                y = y * self.weight
            if getattr(self, "bias", None) is not None:
                y = y + self.bias
            return y

        m.forward = types.MethodType(forward, m)
        patched.append(name)
    return patched


def batch_coupled(model):
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in model.modules())


def run_model(model, X, coupled, overrides=None):
    """X: (c, B, T, F) independent inputs -> (c, B, T, F_out)."""
    c = X.shape[0]
    call = (lambda x: functional_call(model, overrides, (x,))) if overrides else model
    if coupled:
        return torch.stack([call(X[i]) for i in range(c)])
    y = call(X.reshape(c * X.shape[1], *X.shape[2:]))
    return y.reshape(c, X.shape[1], *y.shape[1:])


def bias_jacobian(model, name, bias, X, reverse):
    """d(output)/d(bias) at each input in X (c, B, T, F), rows stacked: (c * B * T * F_out, n).
    Per-input Jacobians, vectorised over the inputs with functorch.vmap; reverse mode when an
    input's output has fewer entries than the bias, forward mode otherwise."""
    def one(b, x):
        return functional_call(model, {name: b}, (x,))
    jac = (functorch.jacrev if reverse else functorch.jacfwd)(one)
    J = functorch.vmap(jac, in_dims=(None, 0))(bias, X)
    return J.reshape(-1, bias.numel())


def perturbation_response(model, name, X, coupled, generator):
    """||JVP of a random N(0, 1) per-token perturbation of the tensor the bias is added to||, per
    input and per bias direction (comparable to one singular value of one input's Jacobian)."""
    owner = model.get_submodule(name.rsplit(".", 1)[0])
    total = 0.0
    with fwAD.dual_level():
        def hook(module, inputs, out):
            tangent = torch.randn(out.shape, generator=generator, dtype=out.dtype)
            return out + fwAD.make_dual(torch.zeros_like(fwAD.unpack_dual(out).primal), tangent)
        handle = owner.register_forward_hook(hook)
        try:
            y = run_model(model, X, coupled)
        finally:
            handle.remove()
        t = fwAD.unpack_dual(y).tangent
        total = 0.0 if t is None else float(t.norm())
    n = dict(model.named_parameters())[name].numel()
    return total / math.sqrt(n * X.shape[0])


def stacked_r(model, name, bias, X, out_entries, widest):
    """The R factors of the Jacobian stacked over the first half of the inputs in X and over all
    of them, built chunk by chunk."""
    n, m = bias.numel(), X.shape[0]
    reverse = out_entries < n
    per_input = min(out_entries, n) * X.shape[1] * X.shape[2] * max(widest, X.shape[3], n)
    chunk = max(1, CHUNK_ELEMENTS // max(1, per_input))
    half = m // 2
    bounds = sorted(set(list(range(0, m, chunk)) + [half, m]))
    R = R_half = None
    for start, end in zip(bounds, bounds[1:]):
        J = bias_jacobian(model, name, bias, X[start:end], reverse)
        if R is not None:
            J = torch.cat([R, J])
        R = torch.linalg.qr(J, mode="r")[1] if J.shape[0] > n else J
        if end == half:
            R_half = R
    return R_half, R


class Reference:
    """The reference for every bias of one stack: {size, nullity, rank, inputs, ambiguous, kept_min,
    null_max} per parameter name."""

    def __init__(self, model, shape, case_seed, widest):
        self.model, self.shape, self.seed, self.widest = model, shape, case_seed, widest
        self.coupled = batch_coupled(model)
        self.params = dict(model.named_parameters())
        self.names = [p for p in self.params if p.endswith("bias")]
        generator = torch.Generator().manual_seed(case_seed)
        nmax = max([self.params[p].numel() for p in self.names] + [1])
        self.X = torch.randn(2 * nmax + 32, *shape, generator=generator, dtype=torch.float64)
        self.responses = {p: perturbation_response(model, p, self.X[:8], self.coupled, generator) for p in self.names}
        with torch.no_grad():
            self.out_entries = model(self.X[0]).numel()
        self.stack_scale = max(list(self.responses.values()) + [0.0])

    def all(self):
        return {p: self.bias(p) for p in self.names}

    def bias(self, p, factor=1):
        """2n + 32 inputs (the first ones of self.X); with factor > 1, factor times as many fresh ones."""
        bias = self.params[p].detach().clone()
        n = bias.numel()
        m = (2 * n + 32) * factor
        if factor == 1:
            X = self.X[:m]
        else:
            generator = torch.Generator().manual_seed(self.seed * 1009 + factor)
            X = torch.randn(m, *self.shape, generator=generator, dtype=torch.float64)
        R_half, R = stacked_r(self.model, p, bias, X, self.out_entries, self.widest)

        def sigmas(R, inputs):
            values = torch.linalg.svdvals(R).tolist() if R.numel() else []
            return [v / math.sqrt(inputs) for v in values] + [0.0] * (n - len(values))

        sigma, sigma_half = sigmas(R, m), sigmas(R_half, m // 2)
        scale = max(max(sigma), self.responses[p], SCALE_FLOOR * self.stack_scale)
        rel = [s / scale if scale > 0 else 0.0 for s in sigma]
        rank = sum(r > REL_RANK for r in rel)
        rank_half = sum(s / scale > REL_RANK for s in sigma_half) if scale > 0 else 0
        band = [r for r in rel if AMBIGUOUS[0] <= r <= AMBIGUOUS[1]]
        kept = [r for r in rel if r > REL_RANK]
        null = [r for r in rel if r <= REL_RANK]
        why = []
        if band:
            why.append("singular values " + ", ".join(f"{v:.1e}" for v in band[:3]) + " of the scale, "
                       f"inside the ambiguous band {AMBIGUOUS[0]:g}..{AMBIGUOUS[1]:g}")
        if rank_half != rank:
            why.append(f"the reference's own rank still rose from {rank_half} (first {m // 2} inputs) to {rank} "
                       f"({m} inputs)")
        return {"size": n, "rank": rank, "nullity": n - rank, "inputs": m, "ambiguous": "; ".join(why),
                "kept_min": min(kept) if kept else None, "null_max": max(null) if null else None}

    def escalate(self, report, ref):
        """Where the engine finds MORE rank than the reference (a smaller redundant_dim, or an upper
        bound below the reference's nullity), the reference may have missed a rare event (a ReLU
        unit that standard-normal inputs seldom reach): it is recomputed with 4, 16, then 64 times as
        many fresh inputs (ESCALATE), and the larger rank is kept (rank found is never spurious here: the
        threshold is far above the rounding)."""
        for row in report["biases"]:
            p = row["param"]
            if p not in ref:
                continue
            k = row.get("redundant_dim")
            claim = k if isinstance(k, int) else row.get("redundant_dim_max")
            if not (isinstance(claim, int) and claim < ref[p]["nullity"]):
                continue
            first = ref[p]
            for factor in ESCALATE:
                more = self.bias(p, factor)
                if more["rank"] > ref[p]["rank"] or more["ambiguous"]:
                    ref[p] = more
                if ref[p]["nullity"] <= claim:
                    break
            ref[p]["escalated"] = (f"{first['inputs']} inputs gave nullity {first['nullity']}" if ref[p] is not first
                                   else f"{more['inputs']} fresh inputs confirm it")
        return ref


def widest_layer(config):
    widths = [config["shape"]["features"]]

    def walk(layers, width):
        for layer in layers:
            if layer["type"] == "residual":
                walk(layer["body"], width)
            elif layer["type"] == "linear":
                width = layer.get("out_features", width)
                widths.append(width)
        return width

    walk(config["layers"], widths[0])
    return max(widths)


# =============================================================================================
# One case
# =============================================================================================
def run(cmd, timeout=ENGINE_TIMEOUT):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def fmt_sigma(v):
    return "none" if v is None else f"{v:.1e}"


def check_case(family, case_seed, config, biaslab, keep):
    """Runs one stack; returns a plain dict (picklable) with the outcome."""
    if torch is None:
        import_torch()
    result = {"family": family, "seed": case_seed, "config": config, "status": "pass", "failures": [],
              "undetermined": [], "flagged": [], "ambiguous": [], "rows": 0, "errors": [],
              "engine_s": 0.0, "torch_s": 0.0, "notes": []}
    label = f"{family}-{case_seed}".replace(":", "-")
    work = tempfile.mkdtemp(prefix=f"degenerate-{label}-")
    try:
        _check(result, work, biaslab)
    except Exception as e:  # a broken case is a failure of the stack, with the reason
        result["errors"].append(f"{type(e).__name__}: {str(e)[:400]}")
    if result["errors"] or result["failures"]:
        result["status"] = "fail"
    if result["status"] == "fail" and keep:
        dest = os.path.join(keep, label)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work, dest)
        result["kept"] = dest
    shutil.rmtree(work, ignore_errors=True)
    return result


def _check(result, work, biaslab):
    config = result["config"]
    path = os.path.join(work, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    start = time.perf_counter()
    analysed = run([biaslab, "analyze", path, "--format", "json", "--no-sweep", "--no-invariances"])
    result["engine_s"] = time.perf_counter() - start
    if analysed.returncode == 2:
        result["status"] = "rejected"
        result["notes"].append(analysed.stderr.strip()[:300] or analysed.stdout.strip()[:300])
        return
    if analysed.returncode != 0:
        result["errors"].append(f"biaslab analyze exited {analysed.returncode}: {analysed.stderr.strip()[:400]}")
        return
    with open(os.path.join(work, "report.json"), "w") as f:
        f.write(analysed.stdout)
    report = json.loads(analysed.stdout)
    if not report.get("ok", True):
        result["status"] = "rejected"
        result["notes"].append(json.dumps(report.get("error"))[:300])
        return
    script, weights = os.path.join(work, "experiment.py"), os.path.join(work, "experiment.safetensors")
    exported = run([biaslab, "export-torch", path, "-o", script, "--weights", weights])
    if exported.returncode != 0:
        result["errors"].append(f"biaslab export-torch exited {exported.returncode}: {exported.stderr.strip()[:400]}")
        return

    start = time.perf_counter()
    shape = (config["shape"]["batch"], config["shape"]["tokens"], config["shape"]["features"])
    model, x, output = load_exported(script, weights)
    patched = patch_single_element_norms(model, shape[0], shape[1])
    if patched:
        result["notes"].append(f"one-element statistics computed by hand in {patched}")
    if output is not None:
        with torch.no_grad():
            y = model(x)
        scale = float(output.abs().max())
        diff = float((y - output).abs().max())
        if not diff <= FORWARD_RTOL * max(scale, 1.0):  # inputs are N(0, 1): outputs of order 1 or 0
            result["errors"].append(f"the torch forward differs from the engine's output: max |diff| {diff:.3e}, "
                                    f"max |output| {scale:.3e}")
            return
    reference = Reference(model, shape, result["seed"], widest_layer(config))
    ref = reference.escalate(report, reference.all())
    result["torch_s"] = time.perf_counter() - start
    compare(result, report, ref)


def compare(result, report, ref):
    rows = {b["param"]: b for b in report["biases"]}
    if sorted(rows) != sorted(ref):
        result["failures"].append({"param": "(bias list)", "what": "the biases reported",
                                   "engine": sorted(rows), "reference": sorted(ref)})
    exact_folds = [f for f in report.get("folds", []) if f.get("exact")]

    def fold_accounts_for(param, k):
        """Does an exact fold move or drop `param` in a way that accounts for all k of its null
        directions (so that they are null for finite moves too, and the row must read
        partly_redundant)? Dropped: yes. Centred in place (from == to): when it removes at least k
        degrees of freedom (a LayerNorm centring removes 1; a bias with more null directions, such
        as one behind a ReLU unit no input reaches, is only partly explained by it). Moved into
        another bias: when that bias has a row of its own that is not flagged as only locally
        redundant (a move maps the null directions onto the target's; a target the fold creates,
        such as a missing o_proj bias, has no row to vouch for them). A rule listed in the row's `folds` with no
        move naming the bias counts when it is exact at a layer that holds the bias."""
        named = False
        for f in exact_folds:
            for move in f.get("moves", []):
                if move.get("from") != param:
                    continue
                named = True
                to = move.get("to")
                if to is None:
                    return True
                if to == param:
                    if not isinstance(f.get("dof_removed"), int) or f["dof_removed"] >= k:
                        return True
                elif to in rows and rows[to].get("consistent") is not False:
                    return True
        if named:
            return False
        return any(f["rule"] in (rows[param].get("folds") or []) and
                   any(param.startswith(w + ".") for w in f.get("where", [])) for f in exact_folds)

    for name, row in rows.items():
        if name not in ref:
            continue
        r = ref[name]
        result["rows"] += 1
        n, k, verdict = row["size"], row.get("redundant_dim"), row.get("verdict")
        values = (f"engine redundant_dim {k} of {n}, verdict {verdict}; reference nullity {r['nullity']} of {r['size']} "
                  f"({r['inputs']} inputs, smallest kept sigma {fmt_sigma(r['kept_min'])}, largest null sigma "
                  f"{fmt_sigma(r['null_max'])} of the scale"
                  + (f"; escalated: {r['escalated']}" if r.get("escalated") else "") + ")")
        st = row.get("structure") or {}
        if st:
            history = st.get("rank_history") or []
            if len(history) > 12:
                history = history[:4] + ["..."] + history[-4:]
            values += f"; engine inputs {st.get('samples')}, rank history {history}"
            if st.get("stop_rule"):
                values += f", stop rule {st['stop_rule']}"
        if r["ambiguous"]:
            result["ambiguous"].append({"param": name, "values": f"{values}; ambiguous: {r['ambiguous']}"})
            continue

        def fail(what):
            result["failures"].append({"param": name, "what": what, "values": values})

        # (a) the redundant dimension
        if k is None:  # "undetermined": bounds instead of one number
            lo, hi = row.get("redundant_dim_min"), row.get("redundant_dim_max")
            if isinstance(lo, int) and isinstance(hi, int) and lo <= r["nullity"] <= hi:
                result["undetermined"].append({"param": name, "values": f"{values}; bounds [{lo}, {hi}]"})
            else:
                fail(f"undetermined bounds [{lo}, {hi}] exclude the reference nullity")
            continue
        if k != r["nullity"]:
            fail("redundant_dim")
        # (b) self-consistency
        inconsistent = (verdict == "effective" and isinstance(k, int) and k > 0) or \
                       (verdict == "redundant" and isinstance(k, int) and k < n)
        if inconsistent:
            if row.get("consistent") is False and row.get("note"):
                result["flagged"].append({"param": name, "values": values, "note": row["note"][:160]})
            else:
                fail(f"verdict {verdict} contradicts redundant_dim {k} of {n} (not flagged)")
        # (c) folds
        if 0 < k < n and verdict == "effective" and fold_accounts_for(name, k):
            part = (row.get("parts") or {}).get("redundant_part") or {}
            fail(f"an exact fold moves or drops this bias, yet verdict effective (redundant part "
                 f"max |delta| {part.get('max_abs_delta')}, floor {part.get('noise_floor')})")


# =============================================================================================
# Driver
# =============================================================================================
def eps_limits(biaslab):
    schema = json.loads(run([biaslab, "schema"]).stdout)
    limits = {}
    for t in schema["layer_types"]:
        for o in t["options"]:
            if o["name"] == "eps" and "max" in o:
                limits[t["name"]] = o["max"]
    return limits


def plan(args, eps_max):
    cases = []
    for path in args.config or []:
        with open(path) as f:
            config = json.load(f)
        cases.append(("cases:" + os.path.basename(path), config.get("seed", 0), config))
    if args.config and not args.case:
        return cases
    if args.case:
        for spec in args.case:
            family, seed = spec.split(":")
            cases.append((family, int(seed), make_config(family, int(seed), eps_max)))
        return cases
    families = args.family or FAMILIES
    for f in families:
        if f not in FAMILIES:
            raise SystemExit(f"unknown family {f}; the families are {', '.join(FAMILIES)}")
    per = [args.count // len(families) + (i < args.count % len(families)) for i in range(len(families))]
    for family, count in zip(families, per):
        for i in range(count):
            seed = args.seed * 1000000 + i
            cases.append((family, seed, make_config(family, seed, eps_max)))
    return cases


def print_result(res, verbose):
    tag = {"pass": "ok  ", "fail": "FAIL", "rejected": "skip"}[res["status"]]
    compact = json.dumps(res["config"], separators=(",", ":"))
    if res["status"] == "fail":
        for e in res["errors"]:
            print(f"FAIL {res['family']} seed {res['seed']}: {e}\n     config {compact}")
        for f in res["failures"]:
            detail = f.get("values") or f"engine {f.get('engine')}, reference {f.get('reference')}"
            print(f"FAIL {res['family']} seed {res['seed']} {f['param']}: {f['what']}: {detail}\n     config {compact}")
        if res.get("kept"):
            print(f"     files kept in {res['kept']}")
    elif verbose:
        print(f"{tag} {res['family']} seed {res['seed']} ({res['rows']} rows, engine {res['engine_s']:.2f} s, "
              f"torch {res['torch_s']:.2f} s) {compact}")
    if verbose:
        for kind in ("undetermined", "flagged", "ambiguous"):
            for item in res[kind]:
                print(f"     {kind}: {item['param']}: {item['values']}")
        for note in res["notes"]:
            print(f"     note: {note}")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", default="build/biaslab", help="the biaslab executable (default build/biaslab)")
    parser.add_argument("--count", type=int, default=300, help="stacks in all, spread over the families (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="the run's seed (default 1); case seeds are SEED*1000000+i")
    parser.add_argument("--family", action="append", help=f"only these families (repeatable): {', '.join(FAMILIES)}")
    parser.add_argument("--case", action="append", metavar="FAMILY:SEED", help="run only this case (repeatable)")
    parser.add_argument("--config", action="extend", nargs="+", metavar="FILE",
                        help="run these config files (e.g. tests/torch/cases/*.json) instead of generated stacks")
    parser.add_argument("--jobs", type=int, default=1, help="parallel worker processes (default 1)")
    parser.add_argument("--keep", metavar="DIR", help="keep the failing cases' files (config, report, script, weights) in DIR")
    parser.add_argument("--verbose", action="store_true", help="print every case, and the undetermined, flagged and ambiguous rows")
    args = parser.parse_args()

    try:
        import_torch()
        importlib.import_module("numpy")  # the exported scripts need it
    except Exception as e:
        print(f"skipped: {sys.executable} cannot import torch and numpy ({e}); Debian: apt-get install python3-torch")
        return 77

    biaslab = os.path.abspath(args.biaslab)
    if not os.access(biaslab, os.X_OK):
        print(f"no biaslab executable at {biaslab}")
        return 1
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        args.keep = os.path.abspath(args.keep)
    cases = plan(args, eps_limits(biaslab))
    print(f"degenerate stacks: {len(cases)} cases, engine {biaslab}, {args.jobs} job(s)", flush=True)

    start = time.perf_counter()
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        import multiprocessing
        pool = ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("fork"))
        futures = [pool.submit(check_case, f, s, c, biaslab, args.keep) for f, s, c in cases]
        results = (fu.result() for fu in futures)
    else:
        pool = None
        results = (check_case(f, s, c, biaslab, args.keep) for f, s, c in cases)

    stats = {}
    done = []
    for res in results:
        print_result(res, args.verbose)
        done.append(res)
        s = stats.setdefault(res["family"].split(":")[0], {"stacks": 0, "failed": 0, "rejected": 0, "rows": 0, "failed_rows": 0,
                                             "undetermined": 0, "flagged": 0, "ambiguous": 0, "engine_s": 0.0,
                                             "torch_s": 0.0})
        s["stacks"] += 1
        s["failed"] += res["status"] == "fail"
        s["rejected"] += res["status"] == "rejected"
        s["rows"] += res["rows"]
        s["failed_rows"] += len({f["param"] for f in res["failures"]})
        for kind in ("undetermined", "flagged", "ambiguous"):
            s[kind] += len(res[kind])
        s["engine_s"] += res["engine_s"]
        s["torch_s"] += res["torch_s"]
    if pool:
        pool.shutdown()
    elapsed = time.perf_counter() - start

    print("\nper family (counts of stacks and rows; engine s and torch s are per stack):")
    print(f"{'family':<9} {'stacks':>6} {'failed':>6} {'rate':>6} {'rejected':>8} {'rows':>6} {'failed rows':>11} "
          f"{'undetermined':>12} {'flagged':>7} {'ambiguous':>9} {'engine s':>8} {'torch s':>7}")
    for family in FAMILIES + sorted(f for f in stats if f not in FAMILIES):
        if family not in stats:
            continue
        s = stats[family]
        run_stacks = s["stacks"] - s["rejected"]
        rate = f"{100 * s['failed'] / run_stacks:.1f}%" if run_stacks else "n/a"
        print(f"{family:<9} {s['stacks']:>6} {s['failed']:>6} {rate:>6} {s['rejected']:>8} {s['rows']:>6} "
              f"{s['failed_rows']:>11} {s['undetermined']:>12} {s['flagged']:>7} {s['ambiguous']:>9} "
              f"{s['engine_s'] / max(1, s['stacks']):>8.3f} {s['torch_s'] / max(1, s['stacks']):>7.3f}")
    failed = sum(r["status"] == "fail" for r in done)
    rejected = sum(r["status"] == "rejected" for r in done)
    passed = len(done) - failed - rejected
    print(f"undetermined rows (bounds contain the reference; honest, not ideal): "
          f"{sum(s['undetermined'] for s in stats.values())}; flagged inconsistent rows (consistent: false, "
          f"with a note; not failed): {sum(s['flagged'] for s in stats.values())}; ambiguous rows (left out): "
          f"{sum(s['ambiguous'] for s in stats.values())}; stacks the engine rejected (exit 2, skipped): {rejected}")
    print(f"{len(done)} stacks in {elapsed:.0f} s ({100 * elapsed / max(1, len(done)):.1f} s per 100 stacks, "
          f"{args.jobs} job(s)); the line below counts stacks (a stack fails when any of its rows fails)")
    print(f"degenerate: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
