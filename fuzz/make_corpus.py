#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/ (committed; run this only to refresh them). It adds
files and deletes none, so hand-added inputs (regression-*, findings of other targets) stay.

    python3 fuzz/make_corpus.py BIASLAB      # BIASLAB: a built CLI, e.g. build/biaslab

config/       every preset, the parity suite's fixed and generated configs (tests/torch/configs.py),
              and the bad-input fixtures of tests/cli_test.cmake and tests/test_config.cpp
analyze/      small configs only (the target skips bigger ones): the parity suite's configs and
              the presets, shrunk to at most 12 tokens in total and 12 features
safetensors/  `biaslab export-torch --weights` files of the safetensors target's fixed config
              (float64, float32, with output and structure inputs), and small hand-made files
Files are named by content hash, as libFuzzer names the inputs it adds; regression-* files are
the shapes of past findings.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
import configs  # noqa: E402  (the parity suite's generator)

# Must match kConfig in fuzz/fuzz_safetensors.cpp.
SAFETENSORS_CONFIG = {"version": 1, "seed": 5, "shape": {"batch": 2, "tokens": 3, "features": 4},
                      "layers": [{"type": "linear", "out_features": 6}, {"type": "batchnorm", "mode": "eval"},
                                 {"type": "residual", "body": [{"type": "layernorm", "bias": False}]},
                                 {"type": "attention", "num_heads": 2}]}

BAD_CONFIGS = [
    '{"version": 1, "shape": {"features": 64}, "layers": [{"type": "linear"}, {"type": "relu"}, {"type": "attention", "num_heads": 5}]}',
    '{"version": 1, "layers": [ {"type": "linear"} }]',
    '{"version": 1, "layers": [{"type": "conv2d"}]}',
    '{"version": 1, "shape": {"batch": 1, "tokens": 512, "features": 4096}, "layers": [{"type": "linear"}, {"type": "layernorm"}]}',
    '{"version": 2, "layers": [{"type": "relu"}]}',
    '{"version": 1, "seed": 9007199254740993, "layers": [{"type": "relu"}]}',
    '{"version": 1, "seed": 2.0, "shape": {"batch": 2.0, "tokens": 1e1, "features": 8}, "layers": [{"type": "relu"}]}',
    '{"version": 1, "layers": []}',
    '{"version": 1, "layers": [{"type": "layernorm", "eps": 0}]}',
    '{"version": 1, "layers": [{"type": "layernorm", "eps": 1e400}]}',
    '{"version": 1, "layers": [{"type": "gelu", "approximate": "sigmoid"}]}',
    '{"version": 1, "layers": [{"type": "residual", "body": [{"type": "linear", "out_features": 3}]}]}',
    '{"version": 1, "shape": {"features": 6}, "layers": [{"type": "attention", "num_heads": 3, "rope": true}]}',
    '{"version": 1, "shape": {"features": 6}, "layers": [{"type": "groupnorm", "num_groups": 4}]}',
    '{"version": 1, "layers": [{"type": "residual", "body": [{"type": "residual", "body": [{"type": "residual", "body": '
    '[{"type": "residual", "body": [{"type": "residual", "body": [{"type": "residual", "body": [{"type": "residual", "body": '
    '[{"type": "residual", "body": [{"type": "residual", "body": [{"type": "relu"}]}]}]}]}]}]}]}]}]}]}',
    '{"version": 1, "shape": {"batch": 256, "tokens": 1024}, "layers": [{"type": "relu"}]}',
    '{"version": 1, "shape": [2, 16, 64], "layers": [{"type": "relu"}]}',
    '{"version": 1, "shape": {"batch": 2, "width": 8}, "layers": [{"type": "relu"}]}',
    '{"version": 1, "layers": [{"type": "linear", "bias": 1, "out_features": "8"}]}',
    '[1, 2, 3]',
    '{"version": 1, "layers": [{"type": "linear", "out_features": 4096}, {"type": "linear", "out_features": 4096}, '
    '{"type": "linear", "out_features": 4096}]}',
    '{"version": 1, "dtype": "float16", "layers": [{"type": "relu"}]}',
    '{"version":1,"layers":[{"type":"softmax","weird\\u0000key":true}]}',
]


def write(folder, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name or hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def compact(config):
    return json.dumps(config, separators=(",", ":"))


def widths(layers, width, out):
    """Widest layer and parameter estimate, as fuzz_analyze.cpp's pre-filter counts them."""
    for l in layers:
        out["layers"] += 1
        f = width
        t = l["type"]
        if t == "linear":
            width = l.get("out_features", f)
            out["params"] += width * f + width
        elif t == "attention":
            out["params"] += 4 * f * f + 4 * f
        elif t == "residual":
            width = widths(l["body"], width, out)
        elif t not in ("relu", "gelu", "softmax"):
            out["params"] += 2 * f
        out["widest"] = max(out["widest"], width)
    return width


def context_tokens(layers):
    """The cross-attention context's tokens (0: none), as the engine's context_tokens()."""
    for l in layers:
        t = l.get("context_tokens", 0) or context_tokens(l.get("body", []))
        for branch in l.get("branches", []):
            t = t or context_tokens(branch)
        if t:
            return t
    return 0


def small(config):
    s = config.get("shape", {})
    rows = s.get("batch", 2) * (s.get("tokens", 16) + context_tokens(config["layers"]))
    out = {"layers": 0, "params": 0, "widest": s.get("features", 64)}
    widths(config["layers"], s.get("features", 64), out)
    return rows <= 12 and out["widest"] <= 12 and out["layers"] <= 8 and out["params"] <= 800


def shrink(config, scale):
    """A preset at a fraction of its width, with a few tokens: same stack, small numbers."""
    c = json.loads(json.dumps(config))
    c["shape"] = {"batch": min(c["shape"].get("batch", 2), 2), "tokens": 3,
                  "features": max(1, c["shape"].get("features", 64) // scale)}

    def walk(layers):
        for l in layers:
            if "out_features" in l:
                l["out_features"] = max(1, l["out_features"] // scale)
            if "num_heads" in l:
                l["num_heads"] = min(l["num_heads"], 2)
            if "num_groups" in l:
                l["num_groups"] = min(l["num_groups"], 2)
            if l.get("context_tokens"):
                l["context_tokens"] = 2
            walk(l.get("body", []))
    walk(c["layers"])
    return c


def main():
    biaslab = os.path.abspath(sys.argv[1])
    out = os.path.join(ROOT, "fuzz", "corpus")
    run = lambda *a: subprocess.run([biaslab, *a], check=True, capture_output=True, text=True).stdout
    presets = [l.split()[0] for l in run("presets").splitlines() if l and not l[0].isspace()]
    preset_configs = [json.loads(run("preset", p)) for p in presets]
    generated = [c for _, c in configs.generated_configs(biaslab)]

    for c in preset_configs + generated:
        write(os.path.join(out, "config"), compact(c))
    for bad in BAD_CONFIGS:
        write(os.path.join(out, "config"), bad)
    # Regressions: the shapes of the findings, at a depth the fuzzer's length limit allows (the
    # stack overflows needed ~10^5 levels; tests/test_config.cpp has those).
    deep = "[" * 100 + "]" * 100
    write(os.path.join(out, "config"), '{"seed":%s,"layers":[{"type":"relu"}]}' % deep, "regression-deep-nesting")

    analyze = [c for c in generated if small(c)]
    for c in preset_configs:
        for scale in (8, 16):
            s = shrink(c, scale)
            if small(s):
                analyze.append(s)
    for c in analyze:
        write(os.path.join(out, "analyze"), compact(c))

    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "c.json")
        for dtype, extra in (("float64", []), ("float32", []), ("float64", ["--structure-inputs", "2"])):
            with open(cfg, "w") as f:
                json.dump(dict(SAFETENSORS_CONFIG, dtype=dtype), f)
            st = os.path.join(tmp, "w.safetensors")
            run("export-torch", cfg, "-o", os.path.join(tmp, "x.py"), "--weights", st, *extra)
            with open(st, "rb") as f:
                write(os.path.join(out, "safetensors"), f.read())

    def file_of(header, data=b""):
        h = header.encode()
        return struct.pack("<Q", len(h)) + h + data
    f64 = lambda *v: struct.pack("<%dd" % len(v), *v)
    hand = [
        file_of('{"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}', f64(1, 2)),
        file_of('{"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}}',
                b"\x00\x3c\x00\xc0\x01\x00\xc0\x3f"),
        file_of('{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},'
                '"e":{"dtype":"F64","shape":[0,3],"data_offsets":[8,8]}}', struct.pack("<2f", 1.5, -0.0)),
        file_of('{"x":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}', f64(1, 2)),
    ]
    for h in hand:
        write(os.path.join(out, "safetensors"), h)
    write(os.path.join(out, "safetensors"),
          file_of('{"x":{"shape":%s,"dtype":"F64","data_offsets":[0,16]}}' % deep, f64(1, 2)),
          "regression-deep-nesting")
    for d in ("config", "analyze", "safetensors"):
        print(d, len(os.listdir(os.path.join(out, d))), "files")


if __name__ == "__main__":
    main()
