"""Weights and input of the exported script: the safetensors reader, and torch's own draw when no
file is given. Always emitted.
"""
from .head import json, math, struct, sys, np, torch, nn
from .head import BATCH, TOKENS, FEATURES, CONTEXT_TOKENS, DTYPE

# @export weights


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
    """Copies the file's parameters and buffers into `model`; returns its input, with the context
    after each sample's tokens when there is cross-attention. The file must hold exactly the
    model's state dict keys plus `input` (and `context` with cross-attention), and may hold the
    engine's `output` and `structure_inputs` (and `structure_contexts`)."""
    state = model.state_dict()
    shapes = dict(state.items())
    shapes["input"] = torch.empty(BATCH, TOKENS, FEATURES)
    if CONTEXT_TOKENS:
        shapes["context"] = torch.empty(BATCH, CONTEXT_TOKENS, FEATURES)
    optional = {"output", "structure_inputs"} | ({"structure_contexts"} if CONTEXT_TOKENS else set())
    missing = sorted(set(shapes) - set(tensors))
    unexpected = sorted(set(tensors) - set(shapes) - optional)
    if missing or unexpected:
        sys.exit(f"{path} does not fit this experiment: missing {missing}, unexpected {unexpected}")
    for name, value in shapes.items():
        if tuple(tensors[name].shape) != tuple(value.shape):
            sys.exit(f"{path}: {name} has shape {list(tensors[name].shape)}, the experiment needs {list(value.shape)}")
    model.load_state_dict({name: tensors[name] for name in state})
    x = tensors["input"].to(torch.float64)
    return torch.cat([x, tensors["context"].to(torch.float64)], dim=1) if CONTEXT_TOKENS else x


def structure_inputs(tensors, path):
    """The engine's structural inputs in a weights file (with their contexts after their tokens),
    or None."""
    given = tensors.get("structure_inputs")
    if given is None or not CONTEXT_TOKENS:
        return given
    contexts = tensors.get("structure_contexts")
    if contexts is None or tuple(contexts.shape) != (given.shape[0], BATCH, CONTEXT_TOKENS, FEATURES):
        sys.exit(f"{path}: structure_inputs needs structure_contexts of shape "
                 f"{[given.shape[0], BATCH, CONTEXT_TOKENS, FEATURES]}, "
                 f"got {None if contexts is None else list(contexts.shape)}")
    return torch.cat([given, contexts], dim=2)


def draw_experiment(model, seed):
    """Weights and input from torch's generator: the engine's distributions, not its numbers.
    Projections U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch.nn.Linear's bound); norm gains
    U(0.5, 1.5) and shifts U(-0.5, 0.5) (not 1 and 0, so every fold is a real test); running mean
    U(-0.5, 0.5), running var U(0.5, 2); position tables as shifts; input (and context) N(0, 1)."""
    generator = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=generator, dtype=torch.float64) * (hi - lo) + lo)

    ranges = {"weight": (0.5, 1.5), "bias": (-0.5, 0.5), "running_mean": (-0.5, 0.5), "running_var": (0.5, 2.0),
              "sinks": (-0.5, 0.5)}  # attention sinks: drawn as shifts
    with torch.no_grad():
        for module in model.modules():
            own = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            for name, t in own:
                if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):  # fan_in: in (/ groups * k...)
                    bound = 1 / math.sqrt(module.weight[0].numel())
                    uniform(t, -bound, bound)
                elif getattr(module, "TABLE", False):  # a position table: drawn as a shift
                    uniform(t, *ranges["bias"])
                else:
                    uniform(t, *ranges[name])
    return torch.randn(BATCH, TOKENS + CONTEXT_TOKENS, FEATURES, generator=generator, dtype=torch.float64)


def round_to_dtype(model, x):
    """A float32 experiment is its values rounded once to float32 (then computed in both precisions)."""
    if DTYPE is torch.float32:
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                t.copy_(t.float().double())
        x = x.float().double()
    return x
