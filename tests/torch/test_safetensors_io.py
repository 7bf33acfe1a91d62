#!/usr/bin/python3
"""The engine's safetensors against files made elsewhere: its writer read back by a plain numpy
reader (layout, alignment, names, dtypes, and the exported script's state dict keys), and its
reader (`export-torch --load`) fed files written here with numpy, good and damaged.

    /usr/bin/python3 tests/torch/test_safetensors_io.py --biaslab build/biaslab
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

BIASLAB = None

# A small float64 experiment and the tensors it declares, written out by hand: the naming
# convention is the interface under test, so it is not derived from the engine here.
CONFIG = {"version": 1, "seed": 3, "dtype": "float64", "shape": {"batch": 2, "tokens": 3, "features": 4},
          "layers": [{"type": "linear", "out_features": 6}, {"type": "layernorm"},
                     {"type": "residual", "body": [{"type": "attention", "num_heads": 2}]},
                     {"type": "batchnorm", "mode": "eval"}]}
SHAPES = {"layers.0.weight": (6, 4), "layers.0.bias": (6,), "layers.1.weight": (6,), "layers.1.bias": (6,)}
for proj in ("q", "k", "v", "o"):
    SHAPES[f"layers.2.body.0.{proj}_proj.weight"] = (6, 6)
    SHAPES[f"layers.2.body.0.{proj}_proj.bias"] = (6,)
SHAPES.update({"layers.3.weight": (6,), "layers.3.bias": (6,), "layers.3.running_mean": (6,),
               "layers.3.running_var": (6,), "input": (2, 3, 4)})

NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}


def write_file(path, tensors, dtypes=None, metadata=None, order=None, header_edit=None, data_edit=None):
    """A safetensors file from {name: array}, written with struct + json + numpy only."""
    dtypes = dtypes or {}
    header, chunks, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in order or list(tensors):
        dt = dtypes.get(name, "F64")
        if dt == "BF16":  # the upper half of a float32 (exact for the values used here)
            raw = (np.asarray(tensors[name], dtype="<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = np.asarray(tensors[name], dtype=NUMPY_DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(np.shape(tensors[name])), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    if header_edit:
        header_edit(header)
    text = json.dumps(header).encode()
    data = b"".join(chunks)
    if data_edit:
        data = data_edit(data)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def write_bytes(path, blob):
    with open(path, "wb") as f:
        f.write(blob)


def read_file(path):
    """(header, metadata, {name: array}) with plain numpy, checking the layout as it goes."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    arrays = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arrays[name] = np.frombuffer(data[begin:end], dtype=NUMPY_DTYPES[info["dtype"]]).reshape(info["shape"])
    return n, header, metadata, arrays, len(data)


def random_tensors(rng):
    t = {name: rng.uniform(-1, 1, size=shape) for name, shape in SHAPES.items()}
    t["layers.3.running_var"] = rng.uniform(0.5, 2.0, size=6)
    return t


def biaslab(*args):
    return subprocess.run([BIASLAB, *args], capture_output=True, text=True)


def load_script(path):
    spec = importlib.util.spec_from_file_location("exported", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Writer(unittest.TestCase):
    """Files the engine writes, read here."""

    def export(self, preset, inputs=0):
        tmp = tempfile.TemporaryDirectory(prefix="biaslab-st-")
        self.addCleanup(tmp.cleanup)
        d = tmp.name
        script, weights = os.path.join(d, "x.py"), os.path.join(d, "x.safetensors")
        r = biaslab("export-torch", "--preset", preset, "-o", script, "--weights", weights,
                    "--structure-inputs", str(inputs))
        self.assertEqual(r.returncode, 0, r.stderr)
        return script, weights

    def test_layout_names_and_dtypes(self):
        for preset, dtype, np_dtype in (("default", "F64", np.float64), ("article4-layernorm-linear", "F32", np.float32)):
            with self.subTest(preset=preset):
                script, weights = self.export(preset, inputs=2)
                n, header, metadata, arrays, data_len = read_file(weights)
                self.assertEqual((8 + n) % 8, 0, "the data starts 8-byte aligned")
                self.assertEqual(metadata["format"], "pt")
                preset_config = json.loads(biaslab("preset", preset).stdout)
                stored = json.loads(metadata["biaslab_config"])
                self.assertEqual((stored["seed"], stored["shape"]), (preset_config["seed"], preset_config["shape"]))
                spans = sorted(tuple(info["data_offsets"]) for info in header.values())
                self.assertEqual(spans[0][0], 0)
                for (_, end), (begin, _) in zip(spans, spans[1:]):
                    self.assertEqual(end, begin, "no gaps or overlaps")
                self.assertEqual(spans[-1][1], data_len, "no trailing bytes")
                for name, info in header.items():
                    want = "F64" if name in ("output", "structure_inputs") else dtype
                    self.assertEqual(info["dtype"], want, name)
                self.assertEqual(arrays["input"].dtype, np_dtype)
                shape = preset_config["shape"]
                self.assertEqual(arrays["input"].shape, (shape["batch"], shape["tokens"], shape["features"]))
                self.assertEqual(arrays["structure_inputs"].shape[0], 2)
                # The exported model's state dict keys are exactly the file's parameter names.
                model = load_script(script).build_model()
                state = model.state_dict()
                self.assertEqual(sorted(state), sorted(set(header) - {"input", "output", "structure_inputs"}))
                for name, value in state.items():
                    self.assertEqual(tuple(value.shape), arrays[name].shape, name)

    def test_default_preset_names(self):
        _, weights = self.export("default")
        _, header, _, _, _ = read_file(weights)
        self.assertIn("layers.0.body.1.k_proj.bias", header)
        self.assertEqual(header["layers.0.body.1.k_proj.weight"]["shape"], [64, 64])
        self.assertEqual(header["layers.1.bias"]["shape"], [64])
        self.assertEqual(header["output"]["shape"], [2, 16, 64])


class Reader(unittest.TestCase):
    """Files written here, read by the engine (export-torch --load)."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="biaslab-st-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.config = os.path.join(self.dir, "config.json")
        with open(self.config, "w") as f:
            json.dump(CONFIG, f)
        self.tensors = random_tensors(np.random.default_rng(5))

    def load(self, path):
        out_script, out_weights = os.path.join(self.dir, "s.py"), os.path.join(self.dir, "s.safetensors")
        return biaslab("export-torch", self.config, "--load", path, "-o", out_script, "--weights", out_weights), out_script, out_weights

    def test_values_survive_and_the_forward_matches_torch(self):
        import torch
        path = os.path.join(self.dir, "in.safetensors")
        dtypes = {"layers.0.weight": "F32", "layers.1.weight": "F16", "layers.3.bias": "BF16"}
        order = sorted(self.tensors, reverse=True)  # data in another order than the header's
        write_file(path, self.tensors, dtypes=dtypes, metadata={"written_by": "numpy"}, order=order)
        r, script, weights = self.load(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        _, _, _, back, _ = read_file(weights)
        for name, value in self.tensors.items():
            dt = dtypes.get(name, "F64")
            if dt == "BF16":
                want = ((np.asarray(value, "<f4").view("<u4") >> 16) << 16).astype("<u4").view("<f4").astype(np.float64)
            else:
                want = np.asarray(value, NUMPY_DTYPES[dt]).astype(np.float64)
            np.testing.assert_array_equal(back[name], want, err_msg=name)
        # The engine's output on those values against torch's forward of the same values.
        module = load_script(script)
        model = module.build_model().double()
        model.load_state_dict({k: torch.from_numpy(np.array(back[k])) for k in model.state_dict()})
        with torch.no_grad():
            y = model(torch.from_numpy(np.array(back["input"])))
        rel = (y.numpy() - back["output"]).__abs__().max() / np.abs(back["output"]).max()
        self.assertLess(rel, 1e-10)

    def test_damaged_files_are_clear_errors(self):
        t = self.tensors
        cases = {
            "too short": (lambda p: write_bytes(p, b"\x01\x02\x03\x04"), "8-byte header length"),
            "header length past the end": (lambda p: write_bytes(p, struct.pack("<Q", 10 ** 6) + b"{}"), "header length"),
            "bad json": (lambda p: write_bytes(p, struct.pack("<Q", 5) + b"{\"a\":"), "not valid JSON"),
            "overlapping offsets": (lambda p: write_file(p, t, header_edit=lambda h: h["layers.0.bias"].update(
                data_offsets=[h["layers.0.bias"]["data_offsets"][0] - 8, h["layers.0.bias"]["data_offsets"][1] - 8])), "overlap"),
            "offsets past the data": (lambda p: write_file(p, t, data_edit=lambda d: d[:-8]), "run past the end"),
            "trailing bytes": (lambda p: write_file(p, t, data_edit=lambda d: d + b"\0" * 8), "after the last tensor"),
            "unknown dtype": (lambda p: write_file(p, t, header_edit=lambda h: h["input"].update(dtype="F12")), "unknown dtype"),
            "missing tensor": (lambda p: write_file(p, {k: v for k, v in t.items() if k != "layers.3.running_var"}), "layers.3.running_var: is missing"),
            "shape mismatch": (lambda p: write_file(p, {**t, "layers.0.weight": t["layers.0.weight"].T}), "layers.0.weight: has shape [4, 6]"),
            "extra tensor": (lambda p: write_file(p, {**t, "layers.0.gain": np.ones(6)}), "not a parameter"),
        }
        for label, (make, message) in cases.items():
            with self.subTest(label):
                path = os.path.join(self.dir, label.replace(" ", "_") + ".safetensors")
                make(path)
                r, _, _ = self.load(path)
                self.assertEqual(r.returncode, 2, f"{label}: {r.stderr}")
                self.assertIn(message, r.stderr)
                self.assertIn(path, r.stderr)


def main():
    global BIASLAB
    args = sys.argv[1:]
    if "--biaslab" not in args:
        sys.exit("usage: test_safetensors_io.py --biaslab PATH [unittest options]")
    i = args.index("--biaslab")
    BIASLAB = os.path.abspath(args[i + 1])
    del args[i:i + 2]
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)


if __name__ == "__main__":
    main()
