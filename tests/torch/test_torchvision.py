#!/usr/bin/python3
"""ResNet's basic block from torchvision (Debian's python3-torchvision) against the engine: the
engine's forward on torchvision's own weights, in BatchNorm's train and eval modes, and the
exported script's Conv + BatchNorm fusion against torch.nn.utils.fusion.fuse_conv_bn_eval.

An independent check of the conv2d and batchnorm semantics on an image grid: torchvision writes the
block as nn.Conv2d(3x3, padding 1, bias=False) -> BatchNorm2d -> ReLU -> Conv2d -> BatchNorm2d,
plus the input, then ReLU, on (B, C, H, W); the engine sees the same image as (B, H * W, C).

    /usr/bin/python3 tests/torch/test_torchvision.py --biaslab build/biaslab
Exit status 0: all agree; 1: a difference; 77: torch or torchvision is not importable (skipped).
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    from torchvision.models import resnet18
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import torch, numpy and torchvision ({e}); "
          "Debian: apt-get install python3-torchvision")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_safetensors_io import read_file, write_file  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from biaslab_torch import folds, layers  # noqa: E402

FORWARD_RTOL = 1e-12  # float64 on both sides: the same function, rounded differently
GRID = (5, 6)


def block_with_random_statistics(seed):
    """resnet18's first basic block (64 channels), float64, with every BatchNorm parameter and
    running statistic drawn (torchvision starts them at 1 and 0, which would hide a mix-up)."""
    torch.manual_seed(seed)
    block = resnet18(weights=None).layer1[0].double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in (block.bn1, block.bn2):
            bn.weight.copy_(torch.rand(64, generator=g, dtype=torch.float64) + 0.5)
            bn.bias.copy_(torch.rand(64, generator=g, dtype=torch.float64) - 0.5)
            bn.running_mean.copy_(torch.rand(64, generator=g, dtype=torch.float64) - 0.5)
            bn.running_var.copy_(torch.rand(64, generator=g, dtype=torch.float64) * 1.5 + 0.5)
    return block


def engine_config(mode):
    bn = {"type": "batchnorm", "mode": mode}
    return {"version": 1, "seed": 0, "shape": {"batch": 2, "features": 64, "grid": list(GRID)},
            "layers": [{"type": "residual", "body": [{"type": "conv2d", "bias": False}, bn, {"type": "relu"},
                                                     {"type": "conv2d", "bias": False}, bn]},
                       {"type": "relu"}]}


def engine_forward(biaslab, block, image, mode, workdir):
    """The engine's output for torchvision's weights and this image, as (B, C, H, W)."""
    B, C, H, W = image.shape
    tensors = {"input": image.flatten(2).transpose(1, 2).numpy()}
    names = {"conv1": "layers.0.body.0", "bn1": "layers.0.body.1", "conv2": "layers.0.body.3", "bn2": "layers.0.body.4"}
    for key, value in block.state_dict().items():
        module, local = key.split(".", 1)
        if local != "num_batches_tracked":
            tensors[f"{names[module]}.{local}"] = value.numpy()
    config, given, taken = (os.path.join(workdir, f) for f in (f"{mode}.json", f"{mode}-in.safetensors", f"{mode}-out.safetensors"))
    with open(config, "w") as f:
        json.dump(engine_config(mode), f)
    write_file(given, tensors)
    run = subprocess.run([biaslab, "export-torch", config, "--load", given, "--weights", taken,
                          "-o", os.path.join(workdir, f"{mode}.py")], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"biaslab export-torch failed: {run.stderr}")
    arrays = read_file(taken)[3]
    return torch.from_numpy(np.array(arrays["output"])).transpose(1, 2).reshape(B, C, H, W)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", required=True)
    args = parser.parse_args()
    failures = 0
    block = block_with_random_statistics(7)
    image = torch.randn(2, 64, *GRID, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    with tempfile.TemporaryDirectory() as workdir:
        for mode in ("train", "eval"):
            reference = copy.deepcopy(block).train(mode == "train")
            with torch.no_grad():
                expected = reference(image)
            got = engine_forward(args.biaslab, block, image, mode, workdir)
            diff = (got - expected).abs().max().item() / expected.abs().max().item()
            ok = diff <= FORWARD_RTOL
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} BasicBlock forward, BatchNorm {mode}: max |engine - torchvision| "
                  f"{diff:.2e} of the largest output (tolerance {FORWARD_RTOL:g})")

    # The exported script's fusion against torch's own, on the block's conv1 and bn1 (eval).
    conv = layers.Conv2d(64, 64, 3, bias=False, grid=GRID).double()
    with torch.no_grad():
        conv.weight.copy_(block.conv1.weight)
    bn = copy.deepcopy(block.bn1).eval()
    fused_ref = fuse_conv_bn_eval(copy.deepcopy(block.conv1).eval(), bn)
    seq = [conv, bn]
    with torch.no_grad():
        folds.fuse_conv_batchnorm_eval(seq, 0)
    for what, ours, ref in (("weight", seq[0].weight, fused_ref.weight), ("bias", seq[0].bias, fused_ref.bias)):
        diff = (ours - ref).abs().max().item()
        ok = len(seq) == 1 and diff <= 1e-12
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} fuse_conv_batchnorm_eval {what} vs fuse_conv_bn_eval: max |diff| {diff:.2e} (tolerance 1e-12)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
