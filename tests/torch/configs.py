"""The parity suite's experiments: every preset, plus a fixed, seeded set of generated configs that
covers every layer type, every option value (read from `biaslab schema`, so a new option is
demanded automatically), both dtypes, edge sizes and every fold rule.

Generation is coverage-driven: while some (layer type, option, value) is not yet used, draw a
small random stack around a layer with that setting. Same seed, same configs.
"""
import json
import random
import subprocess

SEED = 20240611
EXTRA_RANDOM = 12  # random stacks beyond coverage, for combinations nobody thought of
EXTRA_PARALLEL = 4  # random stacks around a parallel block of random branches
EXTRA_CONV = 4  # random convolutional stacks on image grids

# A second value for every numeric option, next to its default.
NUMBER_VALUES = {"eps": [0.1], "rope_base": [500000.0]}


def schema_targets(biaslab):
    """(type, option, value) for every option value the suite must exercise."""
    schema = json.loads(subprocess.run([biaslab, "schema"], check=True, capture_output=True, text=True).stdout)
    targets = []
    for t in schema["layer_types"]:
        targets.append((t["name"], None, None))
        for o in t["options"]:
            if o["type"] == "bool":
                values = [True, False]
            elif o["type"] == "enum":
                values = list(o["values"])
            elif o["type"] == "number":
                values = [o["default"]] + NUMBER_VALUES.get(o["name"], [])
            elif o["name"] == "num_heads":
                values = [1, 2, 4]
            elif o["name"] == "num_groups":
                values = [1, 2, 4]
            elif o["name"] == "out_features":
                values = ["narrower", "wider"]
            elif o["name"] == "rotary_dim":
                values = ["partial"]
            elif o["name"] == "num_kv_heads":
                values = ["grouped", "multi-query"]
            elif o["name"] == "context_tokens":
                values = [0, "cross"]
            elif o["name"] == "hidden":
                values = ["default", "narrow"]
            elif o["name"] == "out_channels":
                values = ["narrower", "wider"]
            elif o["name"] == "kernel_size":
                values = [1, 2, 3]
            elif o["name"] == "groups":
                values = [1, "grouped", "depthwise"]
            elif o["type"] in ("layers", "layer_lists"):
                values = ["nested"]
            else:
                raise SystemExit(f"configs.py does not know how to cover option {t['name']}.{o['name']} "
                                 f"({o['type']}); add it to schema_targets")
            targets += [(t["name"], o["name"], v) for v in values]
    return targets


DEFAULTS = {
    "linear": {"bias": True}, "layernorm": {"elementwise_affine": True, "bias": True, "eps": 1e-5},
    "rmsnorm": {"elementwise_affine": True, "eps": 1e-6},
    "batchnorm": {"mode": "train", "affine": True, "eps": 1e-5},
    "groupnorm": {"num_groups": 4, "affine": True, "eps": 1e-5}, "instancenorm": {"affine": False, "eps": 1e-5},
    "attention": {"num_heads": 4, "q_bias": True, "k_bias": True, "v_bias": True, "o_bias": True,
                  "causal": False, "sinks": False, "rope": False, "rope_style": "half", "rope_base": 10000.0,
                  "qk_norm": "none", "context_tokens": 0},
    "gelu": {"approximate": "none"}, "relu": {}, "softmax": {}, "glu": {"activation": "silu", "bias": False},
    "conv1d": {"kernel_size": 3, "padding": "same", "bias": True},
    "conv2d": {"kernel_size": 3, "padding": "same", "bias": True},
}
SIMPLE_TYPES = ["linear", "layernorm", "rmsnorm", "batchnorm", "groupnorm", "instancenorm", "attention",
                "relu", "gelu", "softmax", "glu"]


class Generator:
    def __init__(self, seed):
        self.rng = random.Random(seed)

    def divisors(self, width, even_quotient=False):
        return [d for d in range(1, width + 1) if width % d == 0 and (not even_quotient or (width // d) % 2 == 0)]

    def layer(self, kind, width, fixed=None):
        """A layer of `kind` at `width` with random options, `fixed` ones forced; returns (layer, out width)."""
        rng, fixed = self.rng, dict(fixed or {})
        layer = {"type": kind}
        out = width
        if kind == "linear":
            shape = fixed.pop("out_features", rng.choice(["same", "same", "narrower", "wider"]))
            if shape == "narrower":
                out = max(1, width // 2)
            elif shape == "wider":
                out = width * 2
            if out != width:
                layer["out_features"] = out
            layer["bias"] = rng.random() < 0.85
        elif kind == "layernorm":
            layer["elementwise_affine"] = rng.random() < 0.8
            layer["bias"] = rng.random() < 0.7
        elif kind == "rmsnorm":
            layer["elementwise_affine"] = rng.random() < 0.8
        elif kind == "batchnorm":
            layer["mode"] = rng.choice(["train", "eval"])
            layer["affine"] = rng.random() < 0.8
        elif kind == "groupnorm":
            groups = fixed.get("num_groups") or rng.choice(self.divisors(width))
            layer["num_groups"] = groups
            layer["affine"] = rng.random() < 0.8
        elif kind == "instancenorm":
            layer["affine"] = rng.random() < 0.5
        elif kind == "attention":
            # The RoPE options need rope; partial RoPE turns the first half (rounded to even) of
            # each head, so it needs a head of at least 4.
            rope_only = any(k in fixed for k in ("rotary_dim", "rope_style", "rope_base"))
            rope = True if rope_only else fixed.get("rope", rng.random() < 0.3 and width % 2 == 0)
            heads = [h for h in self.divisors(width, even_quotient=rope) if not rope_only or width // h >= 4]
            kv_shape = fixed.pop("num_kv_heads", None)
            if kv_shape:  # grouped-query needs at least 2 query heads per kv head
                heads = [h for h in heads if h >= 2 and (kv_shape == "multi-query" or h % 2 == 0)] or heads
            layer["num_heads"] = fixed.get("num_heads") or rng.choice(heads)
            if kv_shape == "multi-query" or (kv_shape is None and layer["num_heads"] > 1 and rng.random() < 0.25):
                layer["num_kv_heads"] = 1 if kv_shape == "multi-query" or rng.random() < 0.5 else \
                    rng.choice([k for k in self.divisors(layer["num_heads"]) if k < layer["num_heads"]])
            elif kv_shape == "grouped":
                layer["num_kv_heads"] = layer["num_heads"] // 2
            for b in ("q_bias", "k_bias", "v_bias", "o_bias"):
                layer[b] = rng.random() < 0.75
            layer["causal"] = rng.random() < 0.4
            if rng.random() < 0.2:
                layer["sinks"] = True
            layer["rope"] = rope
            head_dim = width // layer["num_heads"]
            partial = fixed.pop("rotary_dim", None) == "partial" or (rope and head_dim >= 4 and rng.random() < 0.3)
            if rope and partial:
                layer["rotary_dim"] = head_dim // 2 - (head_dim // 2) % 2
            if rope and rng.random() < 0.3:
                layer["rope_style"] = "interleaved"
            if rope and rng.random() < 0.2:
                layer["rope_base"] = 500000.0
        elif kind == "gelu":
            layer["approximate"] = rng.choice(["none", "tanh"])
        elif kind == "glu":
            if fixed.pop("hidden", rng.choice(["default", "narrow"])) == "narrow":
                layer["hidden"] = max(1, width // 2)
            layer["activation"] = rng.choice(["silu", "gelu", "gelu_tanh"])
            layer["bias"] = rng.random() < 0.5
        if "eps" in DEFAULTS.get(kind, {}) and rng.random() < 0.2:
            layer["eps"] = 0.1
        layer.update(fixed)
        return layer, out

    def stack(self, width, count, depth=0):
        """`count` random layers starting at `width`; returns (layers, out width)."""
        layers = []
        for _ in range(count):
            if depth < 2 and self.rng.random() < 0.15:
                body, w = self.stack(width, self.rng.randint(1, 3), depth + 1)
                layers.append({"type": "residual", "body": self.back_to(body, w, width)})
                continue
            layer, width = self.layer(self.rng.choice(SIMPLE_TYPES), width)
            layers.append(layer)
        return layers, width

    def conv_stack(self):
        """A random stack of convolutions, image norms and activations on an H x W grid."""
        rng = self.rng
        width = rng.choice([4, 6, 8])
        shape = {"batch": rng.randint(1, 3), "features": width, "grid": [rng.randint(1, 4), rng.randint(2, 4)]}
        layers = []
        for _ in range(rng.randint(2, 6)):
            kind = rng.choice(["conv1d", "conv2d", "conv2d", "batchnorm", "groupnorm", "layernorm", "relu", "gelu"])
            if kind.startswith("conv"):
                groups = rng.choice(self.divisors(width))
                out = groups * rng.randint(1, 3) if rng.random() < 0.4 else width
                layer = {"type": kind, "kernel_size": rng.randint(1, 4), "groups": groups, "bias": rng.random() < 0.7,
                         "padding": rng.choice(["same", "same", "causal"])}
                if out != width:
                    layer["out_channels"] = out
                width = out
            elif kind in ("batchnorm", "groupnorm"):
                layer, _ = self.layer(kind, width)
            else:
                layer = {"type": kind}
            layers.append(layer)
        return {"version": 1, "seed": rng.randint(0, 10 ** 6), "dtype": rng.choice(["float32", "float64"]),
                "shape": shape, "layers": layers}

    def back_to(self, layers, width, target):
        """A residual body must end at the block's width."""
        if width != target:
            layers.append({"type": "linear", "out_features": target, "bias": self.rng.random() < 0.8})
        return layers

    def shape(self, target):
        rng = self.rng
        features = rng.choice([4, 6, 8, 12, 16])
        if target[1] in ("num_heads", "num_groups", "num_kv_heads"):
            features = rng.choice([8, 12, 16])
        if target[0] == "attention" and target[1] == "rope" and target[2]:
            features = rng.choice([8, 16])
        return {"batch": rng.randint(1, 3), "tokens": rng.randint(1, 6), "features": features}

    def config_for(self, target):
        """A random stack with the target layer (and option value) somewhere in it."""
        rng = self.rng
        kind, option, value = target
        shape = self.shape(target)
        width = shape["features"]
        before, width = self.stack(width, rng.randint(0, 2))
        if kind in ("attention", "groupnorm"):  # heads and groups were chosen to divide the input width
            before, width = self.back_to(before, width, shape["features"]), shape["features"]
        if kind == "residual":
            body, w = self.stack(width, rng.randint(1, 3), depth=1)
            inner, w2 = self.stack(w, 1, depth=2)
            body.append({"type": "residual", "body": self.back_to(inner, w2, w)})
            middle = [{"type": "residual", "body": self.back_to(body, w, width)}]
        else:
            fixed = {} if option is None else {option: value}
            layer, width_after = self.layer(kind, width, fixed)
            if rng.random() < 0.3:  # inside a residual block
                middle = [{"type": "residual", "body": self.back_to([layer], width_after, width)}]
            else:
                middle, width = [layer], width_after
        after, _ = self.stack(width, rng.randint(1, 3))
        return {"version": 1, "seed": rng.randint(0, 10 ** 6), "dtype": rng.choice(["float32", "float64"]),
                "shape": shape, "layers": before + middle + after}


def used_targets(layers, width, found):
    """Every (type, option, value) a config exercises, defaults included."""
    for layer in layers:
        kind = layer["type"]
        found.add((kind, None, None))
        if kind == "residual":
            found.add((kind, "body", "nested"))
            used_targets(layer["body"], width, found)
            continue
        if kind == "parallel":
            found.add((kind, "branches", "nested"))
            for branch in layer["branches"]:
                used_targets(branch, width, found)
            continue
        options = dict(DEFAULTS.get(kind, {}))
        options.update({k: v for k, v in layer.items()
                        if k not in ("type", "out_features", "rotary_dim", "num_kv_heads", "hidden",
                                     "out_channels", "groups", "context_tokens")})
        if kind in ("conv1d", "conv2d"):
            out = layer.get("out_channels", width)
            groups = layer.get("groups", 1)
            found.add((kind, "groups", 1 if groups == 1 else "depthwise" if groups == width == out else "grouped"))
            if out != width:
                found.add((kind, "out_channels", "narrower" if out < width else "wider"))
                width = out
        if kind == "glu":
            found.add((kind, "hidden", "narrow" if "hidden" in layer else "default"))
        if layer.get("context_tokens", 0):
            found.add((kind, "context_tokens", "cross"))
        if "rotary_dim" in layer:
            found.add((kind, "rotary_dim", "partial"))
        if "num_kv_heads" in layer:
            found.add((kind, "num_kv_heads", "multi-query" if layer["num_kv_heads"] == 1 else "grouped"))
        for option, value in options.items():
            found.add((kind, option, value))
        if kind == "linear" and layer.get("out_features", width) != width:
            found.add((kind, "out_features", "narrower" if layer["out_features"] < width else "wider"))
            width = layer["out_features"]
    return found


# Stacks that the folds and edge cases need for sure (random stacks may miss them).
FIXED = [
    # Parallel blocks (the generator never draws them, so that the random stacks stay as they were):
    # Pythia's block with 25% rotary and ln_f, three branches with folds inside and a nested block,
    # one branch (a residual), and a parallel inside a residual body before BatchNorm.
    ("parallel-pythia", {"version": 1, "seed": 11, "dtype": "float32", "shape": {"batch": 2, "tokens": 6, "features": 16},
                         "layers": [{"type": "parallel", "branches": [
                                        [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": True, "rope": True, "rotary_dim": 2}],
                                        [{"type": "layernorm"}, {"type": "linear", "out_features": 32}, {"type": "gelu"}, {"type": "linear", "out_features": 16}]]},
                                    {"type": "layernorm"}]}),
    ("parallel-three-branches", {"version": 1, "seed": 12, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 8},
                                 "layers": [{"type": "linear"},
                                            {"type": "parallel", "branches": [
                                                [{"type": "linear", "out_features": 4}, {"type": "linear", "out_features": 8}],
                                                [{"type": "rmsnorm"}, {"type": "glu", "hidden": 12, "bias": True}],
                                                [{"type": "residual", "body": [{"type": "relu"}, {"type": "linear"}]},
                                                 {"type": "parallel", "branches": [[{"type": "batchnorm", "mode": "eval"}, {"type": "linear"}], [{"type": "tanh"}]]}]]},
                                            {"type": "layernorm", "elementwise_affine": False}, {"type": "gelu"}]}),
    ("parallel-one-branch", {"version": 1, "seed": 13, "dtype": "float32", "shape": {"batch": 1, "tokens": 5, "features": 6},
                             "layers": [{"type": "parallel", "branches": [[{"type": "attention", "num_heads": 2}]]}, {"type": "softmax"}]}),
    ("parallel-before-norms", {"version": 1, "seed": 15, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 6},
                               "layers": [{"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "relu"}],
                                                                            [{"type": "gelu"}, {"type": "residual", "body": [{"type": "linear"}]}]]},
                                          {"type": "batchnorm"}, {"type": "linear"},
                                          {"type": "parallel", "branches": [[{"type": "layernorm"}], [{"type": "linear", "bias": False}, {"type": "rmsnorm"}], [{"type": "linear"}]]},
                                          {"type": "groupnorm", "num_groups": 2}]}),
    ("parallel-relu-in-later-branch", {"version": 1, "seed": 4, "dtype": "float64", "shape": {"batch": 1, "tokens": 1, "features": 8},
                                       "layers": [{"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "relu"}]]},
                                                  {"type": "relu"}, {"type": "linear"}]}),
    ("parallel-merge-order", {"version": 1, "seed": 16, "dtype": "float32", "shape": {"batch": 2, "tokens": 3, "features": 8},
                              "layers": [{"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "glu", "hidden": 4, "bias": True}]]},
                                         {"type": "parallel", "branches": [[{"type": "layernorm"}], [{"type": "batchnorm", "mode": "eval"}], [{"type": "linear"}]]},
                                         {"type": "gelu"}]}),
    ("parallel-in-residual", {"version": 1, "seed": 14, "dtype": "float64", "shape": {"batch": 3, "tokens": 3, "features": 8},
                              "layers": [{"type": "residual", "body": [
                                             {"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "silu"}, {"type": "linear", "bias": False}]]},
                                             {"type": "linear"}]},
                                         {"type": "batchnorm"}, {"type": "linear", "out_features": 4}]}),
    # Convolutions (the generator draws them only in EXTRA_CONV stacks of their own): ResNet's
    # basic block, ConvNeXt's block, a causal depthwise conv1d as Mamba's, every BatchNorm (eval)
    # fold beside a convolution (the padded one not exact), and every option value of both kinds.
    ("conv-resnet-basic", {"version": 1, "seed": 21, "dtype": "float64", "shape": {"batch": 2, "features": 8, "grid": [3, 4]},
                           "layers": [{"type": "residual", "body": [
                                          {"type": "conv2d", "bias": False}, {"type": "batchnorm"}, {"type": "relu"},
                                          {"type": "conv2d", "bias": False}, {"type": "batchnorm"}]},
                                      {"type": "relu"}, {"type": "conv2d", "kernel_size": 1, "out_channels": 4}]}),
    ("conv-convnext", {"version": 1, "seed": 22, "dtype": "float32", "shape": {"batch": 1, "features": 8, "grid": [4, 4]},
                       "layers": [{"type": "residual", "body": [
                                      {"type": "conv2d", "kernel_size": 7, "groups": 8}, {"type": "layernorm"},
                                      {"type": "linear", "out_features": 32}, {"type": "gelu"}, {"type": "linear", "out_features": 8}]},
                                  {"type": "layernorm"}]}),
    ("conv-eval-folds", {"version": 1, "seed": 23, "dtype": "float64", "shape": {"batch": 2, "features": 8, "grid": [3, 3]},
                         "layers": [{"type": "conv2d", "kernel_size": 2, "padding": "causal"}, {"type": "batchnorm", "mode": "eval"}, {"type": "relu"},
                                    {"type": "batchnorm", "mode": "eval"}, {"type": "conv2d", "kernel_size": 1, "groups": 2, "out_channels": 4},
                                    {"type": "batchnorm", "mode": "eval", "affine": False}, {"type": "conv1d", "kernel_size": 3, "out_channels": 6, "groups": 2},
                                    {"type": "batchnorm", "mode": "eval"}, {"type": "conv2d", "kernel_size": 3, "groups": 6}, {"type": "tanh"}]}),
    ("conv1d-causal-depthwise", {"version": 1, "seed": 24, "dtype": "float32", "shape": {"batch": 2, "tokens": 7, "features": 6},
                                 "layers": [{"type": "linear", "out_features": 12}, {"type": "conv1d", "kernel_size": 4, "padding": "causal", "groups": 12},
                                            {"type": "silu"}, {"type": "conv1d", "kernel_size": 1, "out_channels": 6, "bias": False},
                                            {"type": "groupnorm", "num_groups": 3}]}),
    ("conv-widths-and-norms", {"version": 1, "seed": 25, "dtype": "float64", "shape": {"batch": 2, "features": 6, "grid": [2, 5]},
                               "layers": [{"type": "conv1d", "kernel_size": 2, "out_channels": 12, "groups": 3}, {"type": "instancenorm", "affine": True},
                                          {"type": "conv2d", "kernel_size": 2, "out_channels": 4, "groups": 2, "bias": False, "padding": "causal"},
                                          {"type": "conv1d", "out_channels": 2, "padding": "causal"}, {"type": "batchnorm"},
                                          {"type": "conv2d", "out_channels": 6}, {"type": "layernorm", "bias": False}]}),
    # Position tables (never drawn by the generator, so that the random stacks stay as they were):
    # ViT's pre-norm encoder block read only through LayerNorms (centre_writers takes each row's
    # mean), a table before GroupNorm (each group's mean over the table), softmax, InstanceNorm and
    # BatchNorm (train) (each feature's mean over the positions), one
    # inside a residual body, and a single position with batch 1.
    ("pos-embedding-vit", {"version": 1, "seed": 31, "dtype": "float32", "shape": {"batch": 2, "tokens": 5, "features": 8},
                           "layers": [{"type": "pos_embedding"},
                                      {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]},
                                      {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 16},
                                                                    {"type": "gelu"}, {"type": "linear", "out_features": 8}]},
                                      {"type": "layernorm"}]}),
    ("pos-embedding-before-norms", {"version": 1, "seed": 32, "dtype": "float64", "shape": {"batch": 2, "tokens": 3, "features": 6},
                                    "layers": [{"type": "pos_embedding"}, {"type": "groupnorm", "num_groups": 2}, {"type": "linear"},
                                               {"type": "residual", "body": [{"type": "pos_embedding"}]}, {"type": "batchnorm"},
                                               {"type": "pos_embedding"}, {"type": "softmax"}, {"type": "relu"}, {"type": "pos_embedding"},
                                               {"type": "instancenorm", "affine": True}, {"type": "pos_embedding"}, {"type": "batchnorm"}, {"type": "gelu"}]}),
    ("pos-embedding-grid-one-position", {"version": 1, "seed": 33, "dtype": "float64", "shape": {"batch": 1, "features": 4, "grid": [1, 1]},
                                         "layers": [{"type": "conv2d", "kernel_size": 3}, {"type": "pos_embedding"}, {"type": "layernorm"},
                                                    {"type": "pos_embedding"}, {"type": "attention", "num_heads": 2}]}),
    ("fold-merge-linear-linear", {"version": 1, "seed": 1, "dtype": "float64", "shape": {"batch": 2, "tokens": 3, "features": 6},
                                  "layers": [{"type": "linear", "out_features": 4}, {"type": "linear", "out_features": 8, "bias": False}, {"type": "softmax"}]}),
    ("fold-batchnorm-eval-linear", {"version": 1, "seed": 2, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 8},
                                    "layers": [{"type": "relu"}, {"type": "batchnorm", "mode": "eval"}, {"type": "linear"}, {"type": "gelu", "approximate": "tanh"}]}),
    ("fold-linear-batchnorm-eval-noaffine", {"version": 1, "seed": 3, "dtype": "float32", "shape": {"batch": 3, "tokens": 2, "features": 8},
                                             "layers": [{"type": "linear", "bias": False}, {"type": "batchnorm", "mode": "eval", "affine": False}, {"type": "relu"}]}),
    ("fold-layernorm-to-rmsnorm", {"version": 1, "seed": 4, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 8},
                                   "layers": [{"type": "linear"}, {"type": "layernorm", "bias": False}, {"type": "gelu"}]}),
    ("fold-attention-into-layernorm-nobias", {"version": 1, "seed": 5, "dtype": "float64", "shape": {"batch": 2, "tokens": 5, "features": 8},
                                              "layers": [{"type": "attention", "num_heads": 2}, {"type": "layernorm", "elementwise_affine": False}]}),
    ("fold-rmsnorm-gain-into-attention", {"version": 1, "seed": 6, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 8},
                                          "layers": [{"type": "rmsnorm"}, {"type": "attention", "num_heads": 2, "rope": True, "causal": True}]}),
    ("fold-drop-bias-through-residual", {"version": 1, "seed": 7, "dtype": "float64", "shape": {"batch": 3, "tokens": 4, "features": 8},
                                         "layers": [{"type": "residual", "body": [{"type": "linear"}, {"type": "relu"}, {"type": "linear"}]},
                                                    {"type": "batchnorm"}, {"type": "residual", "body": [{"type": "attention", "num_heads": 2}]},
                                                    {"type": "instancenorm", "affine": True}, {"type": "residual", "body": [{"type": "layernorm"}]},
                                                    {"type": "groupnorm", "num_groups": 2}]}),
    ("edge-one-token", {"version": 1, "seed": 8, "dtype": "float64", "shape": {"batch": 2, "tokens": 1, "features": 4},
                        "layers": [{"type": "attention", "num_heads": 2}, {"type": "linear"}, {"type": "instancenorm", "affine": True}, {"type": "linear", "out_features": 3}]}),
    ("edge-one-feature", {"version": 1, "seed": 9, "dtype": "float32", "shape": {"batch": 1, "tokens": 3, "features": 1},
                          "layers": [{"type": "linear"}, {"type": "layernorm"}, {"type": "linear", "out_features": 2}, {"type": "softmax"}]}),
    ("edge-batch-one-batchnorm", {"version": 1, "seed": 10, "dtype": "float64", "shape": {"batch": 1, "tokens": 5, "features": 4},
                                  "layers": [{"type": "linear"}, {"type": "batchnorm"}, {"type": "gelu"}, {"type": "linear"}]}),
    ("fold-centre-writers", {"version": 1, "seed": 14, "dtype": "float64", "shape": {"batch": 2, "tokens": 4, "features": 8},
                             "layers": [{"type": "linear"},
                                        {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": True}]},
                                        {"type": "residual", "body": [{"type": "layernorm", "bias": False}, {"type": "glu", "hidden": 8, "bias": True}]},
                                        {"type": "layernorm"}, {"type": "linear", "out_features": 3}]}),
    ("fold-drop-unrotated-key-bias", {"version": 1, "seed": 13, "dtype": "float32", "shape": {"batch": 2, "tokens": 5, "features": 16},
                                      "layers": [{"type": "linear"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "rope": True, "rotary_dim": 2, "rope_style": "interleaved"},
                                                 {"type": "layernorm"}]}),
    ("qk-norm-grouped-partial-rope", {"version": 1, "seed": 12, "dtype": "float64", "shape": {"batch": 2, "tokens": 5, "features": 16},
                                      "layers": [{"type": "attention", "num_heads": 4, "num_kv_heads": 2, "qk_norm": "layernorm"},
                                                 {"type": "attention", "num_heads": 2, "qk_norm": "layernorm", "causal": True, "rope": True, "rotary_dim": 4}]}),
    ("postnorm-float32-causal-rope", {"version": 1, "seed": 11, "dtype": "float32", "shape": {"batch": 2, "tokens": 6, "features": 16},
                                      "layers": [{"type": "residual", "body": [{"type": "attention", "num_heads": 4, "causal": True, "rope": True}]},
                                                 {"type": "layernorm"},
                                                 {"type": "residual", "body": [{"type": "linear", "out_features": 32}, {"type": "gelu", "approximate": "tanh"}, {"type": "linear", "out_features": 16}]},
                                                 {"type": "layernorm", "bias": False}]}),
]


# Cross-attention stacks, added after the generated ones (they use options the generator draws,
# so counting them with FIXED would change every random stack after them): a decoder block as
# Whisper's (causal self-attention without a key bias, then cross-attention, then an MLP);
# grouped-query cross-attention with qk_norm and sinks after a Linear that widens the stream (the
# context keeps the experiment's width) with a ReLU after it; and one token reading one context
# token with batch 1.
CROSS_ATTENTION = [
    ("cross-attention-decoder", {"version": 1, "seed": 41, "dtype": "float32", "shape": {"batch": 2, "tokens": 4, "features": 8},
                                 "layers": [{"type": "residual", "body": [{"type": "layernorm"},
                                                                          {"type": "attention", "num_heads": 2, "causal": True, "k_bias": False}]},
                                            {"type": "residual", "body": [{"type": "layernorm"},
                                                                          {"type": "attention", "num_heads": 2, "k_bias": False, "context_tokens": 6}]},
                                            {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 16},
                                                                          {"type": "gelu"}, {"type": "linear", "out_features": 8}]},
                                            {"type": "layernorm"}]}),
    ("cross-attention-gqa-qknorm", {"version": 1, "seed": 42, "dtype": "float64", "shape": {"batch": 2, "tokens": 3, "features": 6},
                                    "layers": [{"type": "linear", "out_features": 8}, {"type": "rmsnorm"},
                                               {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "qk_norm": "layernorm",
                                                "sinks": True, "context_tokens": 5},
                                               {"type": "relu"}, {"type": "linear", "out_features": 4},
                                               {"type": "attention", "num_heads": 2, "num_kv_heads": 1, "qk_norm": "rmsnorm",
                                                "context_tokens": 5}, {"type": "layernorm"}]}),
    ("cross-attention-one-token", {"version": 1, "seed": 43, "dtype": "float64", "shape": {"batch": 1, "tokens": 1, "features": 4},
                                   "layers": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "context_tokens": 1},
                                              {"type": "batchnorm"}]}),
]


def generated_configs(biaslab, seed=SEED):
    """[(name, config)]: the fixed stacks, then random ones until every schema target is used."""
    configs = list(FIXED)
    covered = set()
    for _, c in configs:
        used_targets(c["layers"], c["shape"]["features"], covered)
    # context_tokens is covered by the cross-attention stacks alone (the generator never draws it).
    for _, c in CROSS_ATTENTION:
        covered |= {t for t in used_targets(c["layers"], c["shape"]["features"], set()) if t[1] == "context_tokens"}
    generator = Generator(seed)
    for target in schema_targets(biaslab):
        if target in covered:
            continue
        config = generator.config_for(target)
        used_targets(config["layers"], config["shape"]["features"], covered)
        kind, option, value = target
        label = kind if option is None else f"{kind}-{option}-{str(value).lower()}"
        configs.append((f"gen-{label}", config))
    for i in range(EXTRA_RANDOM):
        shape = generator.shape(("any", None, None))
        layers, _ = generator.stack(shape["features"], generator.rng.randint(2, 6))
        configs.append((f"random-{i}", {"version": 1, "seed": generator.rng.randint(0, 10 ** 6),
                                        "dtype": generator.rng.choice(["float32", "float64"]),
                                        "shape": shape, "layers": layers}))
    # Random parallel blocks, from a generator of their own so that the stacks above stay as
    # they were: a few branches of random layers, each brought back to the block's width.
    parallel = Generator(seed + 1)
    for i in range(EXTRA_PARALLEL):
        shape = parallel.shape(("any", None, None))
        width = shape["features"]
        before, w = parallel.stack(width, parallel.rng.randint(0, 2))
        branches = []
        for _ in range(parallel.rng.randint(1, 3)):
            branch, bw = parallel.stack(w, parallel.rng.randint(1, 3), depth=1)
            branches.append(parallel.back_to(branch, bw, w))
        after, _ = parallel.stack(w, parallel.rng.randint(1, 2))
        configs.append((f"random-parallel-{i}", {"version": 1, "seed": parallel.rng.randint(0, 10 ** 6),
                                                 "dtype": parallel.rng.choice(["float32", "float64"]), "shape": shape,
                                                 "layers": before + [{"type": "parallel", "branches": branches}] + after}))
    # Random convolutional stacks on a grid, from a generator of their own (as the parallel ones).
    conv = Generator(seed + 2)
    for i in range(EXTRA_CONV):
        configs.append((f"random-conv-{i}", conv.conv_stack()))
    configs += CROSS_ATTENTION
    for _, c in CROSS_ATTENTION:
        used_targets(c["layers"], c["shape"]["features"], covered)
    missing = [t for t in schema_targets(biaslab) if t not in covered]
    if missing:
        raise SystemExit(f"generated configs miss {missing}")
    return configs
