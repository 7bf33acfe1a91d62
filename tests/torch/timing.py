#!/usr/bin/python3
"""Time the same analysis natively and in the exported PyTorch script, in one run.

"The same analysis": per bias the structural redundant dimension and the perturbation verdict,
then every fold (engine: `analyze --no-sweep --no-invariances`; torch: the exported script on the
engine's weights, input and structural inputs, full Jacobians). Times are the analyses' own
(timing_ms.total of each report: no process start, no torch import, no file loading), median of
--repeat runs, taken alternately so both see the same machine load.

    /usr/bin/python3 tests/torch/timing.py --biaslab build/biaslab [--preset NAME ...] [--repeat 3]
Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

DEFAULT_PRESETS = ["article1-qk-softmax", "default", "norm-zoo", "few-tokens-trap", "causal-decoder-layer",
                   "prenorm-transformer", "postnorm-transformer"]


def run_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", required=True)
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--preset", action="append", help="preset to time (repeatable; default: a small set)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the engine)")
    args = parser.parse_args()
    biaslab = os.path.abspath(args.biaslab)
    torch_info = subprocess.run([args.python, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"],
                                capture_output=True, text=True, check=True).stdout.split()

    print(f"torch {torch_info[0]} ({args.threads} thread(s); default {torch_info[1]}), biaslab native, "
          f"median of {args.repeat}\n")
    print("| preset | biases | engine ms | torch ms | torch / engine |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="biaslab-timing-") as work:
        for preset in args.preset or DEFAULT_PRESETS:
            script, weights = os.path.join(work, preset + ".py"), os.path.join(work, preset + ".safetensors")
            engine_ms, torch_ms = [], []
            for _ in range(args.repeat):
                report = run_json([biaslab, "analyze", "--preset", preset, "--format", "json", "--no-sweep",
                                   "--no-invariances"])
                engine_ms.append(report["timing_ms"]["total"])
                if not torch_ms:
                    subprocess.run([biaslab, "export-torch", "--preset", preset, "-o", script, "--weights", weights,
                                    "--structure-inputs", str(report["structural"]["inputs_made"])],
                                   capture_output=True, check=True)
                t = run_json([args.python, script, weights, "--json", "--threads", str(args.threads)])
                torch_ms.append(t["timing_ms"]["total"])
            e, t = statistics.median(engine_ms), statistics.median(torch_ms)
            print(f"| {preset} | {len(report['biases'])} | {e:.1f} | {t:.0f} | {t / e:.0f}x |", flush=True)


if __name__ == "__main__":
    main()
