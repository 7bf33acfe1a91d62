#!/usr/bin/python3
"""Time the same analysis natively and in the exported PyTorch script, in one run.

"The same analysis": per bias the structural redundant dimension and the perturbation verdict,
then every fold (engine: `analyze --no-sweep --no-invariances`; torch: the exported script on the
engine's weights, input and structural inputs, full Jacobians). Times are the analyses' own
(timing_ms.total of each report: no process start, no torch import, no file loading), median of
--repeat runs, taken alternately so both see the same machine load.

    /usr/bin/python3 tests/torch/timing.py --biaslab build/biaslab [--preset NAME ...] [--config FILE ...]
        [--repeat 3] [--timeout 600]
Prints a Markdown table. A script that does not finish within --timeout seconds (10 minutes by
default), or stops on an error (memory, most likely, at real widths), is stopped and its row says
so; its ratio is then a lower bound: the timeout less the script's own start (importing torch,
measured once), against the engine's median.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

DEFAULT_PRESETS = ["article1-qk-softmax", "default", "norm-zoo", "few-tokens-trap", "causal-decoder-layer",
                   "prenorm-transformer", "postnorm-transformer"]


def run_json(cmd, timeout=None, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout, env=env).stdout
    return json.loads(out)


def torch_run(cmd, timeout):
    """The script's timing_ms.total, or (None, why it has none)."""
    try:
        return run_json(cmd, timeout)["timing_ms"]["total"], None
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout / 60:g} min" if timeout >= 60 else f"did not finish in {timeout:g} s"
    except subprocess.CalledProcessError as e:
        lines = (e.stderr or "").strip().splitlines()
        return None, f"stopped (exit {e.returncode}): {lines[-1][:100] if lines else 'no message'}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", required=True)
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--preset", action="append", default=[], help="preset to time (repeatable)")
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="config file to time (repeatable), e.g. bench/configs/gpt2-small-block.json")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for torch and for the engine (OMP_NUM_THREADS; default 1)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one run of the PyTorch script may take (default 600); past it, the row says so")
    args = parser.parse_args()
    biaslab = os.path.abspath(args.biaslab)
    torch_info = subprocess.run([args.python, "-c", "import torch; print(torch.__version__, torch.get_num_threads())"],
                                capture_output=True, text=True, check=True).stdout.split()
    # The engine on as many threads as torch (it takes every core for a large analysis otherwise).
    engine_env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    targets = [(p, ["--preset", p]) for p in args.preset] + \
              [(os.path.splitext(os.path.basename(c))[0], [os.path.abspath(c)]) for c in args.config]
    if not targets:
        targets = [(p, ["--preset", p]) for p in DEFAULT_PRESETS]

    print(f"torch {torch_info[0]} ({args.threads} thread(s); default {torch_info[1]}), biaslab native "
          f"({args.threads} thread(s)), median of {args.repeat}\n")
    print("| preset | biases | engine ms | torch ms | torch / engine |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="biaslab-timing-") as work:
        start_s = None  # the script's own start (importing torch), once: for a stopped run's bound
        for name, source in targets:
            script, weights = os.path.join(work, name + ".py"), os.path.join(work, name + ".safetensors")
            engine_ms, torch_ms, why = [], [], None
            for _ in range(args.repeat):
                report = run_json([biaslab, "analyze"] + source + ["--format", "json", "--no-sweep", "--no-invariances"],
                                  env=engine_env)
                engine_ms.append(report["timing_ms"]["total"])
                if why:
                    continue  # (the script stopped once: it is not run again)
                if not torch_ms:
                    subprocess.run([biaslab, "export-torch"] + source + ["-o", script, "--weights", weights,
                                    "--structure-inputs", str(report["structural"]["inputs_made"])],
                                   capture_output=True, check=True)
                t, why = torch_run([args.python, script, weights, "--json", "--threads", str(args.threads)], args.timeout)
                if t is not None:
                    torch_ms.append(t)
            e = statistics.median(engine_ms)
            if why:
                if start_s is None:
                    t0 = time.perf_counter()
                    subprocess.run([args.python, script, "--help"], capture_output=True, check=True)
                    start_s = time.perf_counter() - t0
                bound = (args.timeout - start_s) * 1e3 / e if why.startswith("did not finish") else None
                ratio = f"> {bound:.0f}x" if bound and bound > 0 else "none"
                print(f"| {name} | {len(report['biases'])} | {e:.1f} | {why} | {ratio} |", flush=True)
                continue
            t = statistics.median(torch_ms)
            print(f"| {name} | {len(report['biases'])} | {e:.1f} | {t:.0f} | {t / e:.0f}x |", flush=True)


if __name__ == "__main__":
    main()
