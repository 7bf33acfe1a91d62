#!/usr/bin/python3
"""Torch parity suite: the engine against PyTorch, experiment by experiment.

For every preset and every generated config (configs.py), it
  1. runs `biaslab analyze --format json` (biases and folds),
  2. exports the experiment (`biaslab export-torch --weights`, with the engine's structural inputs),
  3. runs the exported script with /usr/bin/python3 (torch 1.13 on Debian) and `--json`,
  4. compares: the float64 forward equals the engine's output to FORWARD_RTOL (relative to the
     largest output); every bias has the same redundant dimension and verdict; the same folds
     apply and every one is exact in both (one the engine says is inexact, with its reason, is off
     in both by the same max |delta|: the script's weights are the engine's).
A mismatch prints the config, the parameter (or fold) and both values. One difference is reported
but not failed: partly_redundant vs effective when only the single random probe inside the null
space differs (see compare()).

Biases wider than WIDE (the 1024-wide article presets) get a lighter structural check: torch
analyses a random SUBSPACE-dimensional subspace of the bias, whose nullity must be
max(0, SUBSPACE - (n - k)) for the engine's redundant dimension k; forward, verdicts and folds
are compared in full, except that the script's verdict is then undetermined for a bias that is
not all redundant (the subspace bounds its redundant dimension only by n - SUBSPACE).

    /usr/bin/python3 tests/torch/parity.py --biaslab build/biaslab [--jobs 2] [--only NAME] [--keep]
Exit status 0: all agree; 1: a mismatch; 77: torch is not importable (skipped).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import configs

FORWARD_RTOL = 1e-10
WIDE = 256
SUBSPACE = 32
FOLD_RULES = {"fold_layernorm_affine", "fold_rmsnorm_gain", "fuse_linear_batchnorm_eval",
              "fuse_batchnorm_eval_linear", "drop_key_bias", "drop_unrotated_key_bias", "fold_value_bias", "drop_bias_before_norm",
              "centre_bias_before_norm", "centre_writers", "merge_branch_biases", "merge_linear_linear", "layernorm_to_rmsnorm",
              "fuse_conv_batchnorm_eval", "fuse_batchnorm_eval_conv"}


def run(cmd, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def preset_cases(biaslab):
    listing = run([biaslab, "presets"]).stdout
    names = [line.split()[0] for line in listing.splitlines() if line and not line[0].isspace()]
    return [(name, json.loads(run([biaslab, "preset", name]).stdout)) for name in names]


def widest_bias(config):
    widths, width = [], config["shape"]["features"]

    def walk(layers, width):
        for layer in layers:
            if layer["type"] == "residual":
                walk(layer["body"], width)
                continue
            if layer["type"] == "parallel":
                for branch in layer["branches"]:
                    walk(branch, width)
                continue
            if layer["type"] == "linear":
                width = layer.get("out_features", width)
            if layer["type"] in ("conv1d", "conv2d"):
                width = layer.get("out_channels", width)
            widths.append(width)
        return width

    walk(config["layers"], width)
    return max(widths + [width])


class Case:
    def __init__(self, name, config):
        self.name, self.config = name, config
        self.failures, self.notes = [], []
        self.engine_s = self.torch_s = self.torch_analysis_ms = self.forward_rel = None

    def fail(self, what, engine, torch_value):
        self.failures.append(f"{what}: engine {engine}, torch {torch_value}")


def check(case, biaslab, python, work):
    base = os.path.join(work, case.name)
    config_path = base + ".json"
    with open(config_path, "w") as f:
        json.dump(case.config, f)

    start = time.perf_counter()
    analysed = run([biaslab, "analyze", config_path, "--format", "json", "--no-sweep", "--no-invariances"])
    case.engine_s = time.perf_counter() - start
    if analysed.returncode != 0:
        case.failures.append(f"biaslab analyze failed ({analysed.returncode}): {analysed.stderr.strip()[:500]}")
        return case
    engine = json.loads(analysed.stdout)

    inputs = engine["structural"]["inputs_made"]
    exported = run([biaslab, "export-torch", config_path, "-o", base + ".py", "--weights", base + ".safetensors",
                    "--structure-inputs", str(min(inputs, 64))])
    if exported.returncode != 0:
        case.failures.append(f"biaslab export-torch failed ({exported.returncode}): {exported.stderr.strip()[:500]}")
        return case

    light = widest_bias(case.config) > WIDE
    cmd = [python, base + ".py", base + ".safetensors", "--json"]
    if light:
        cmd += ["--structure-subspace", str(SUBSPACE)]
        case.notes.append(f"structural check on a random {SUBSPACE}-dimensional subspace of each bias (wider than {WIDE})")
    start = time.perf_counter()
    ran = run(cmd)
    case.torch_s = time.perf_counter() - start
    if ran.returncode != 0:
        case.failures.append(f"the exported script failed ({ran.returncode}): {ran.stderr.strip()[-1500:]}")
        return case
    torch_report = json.loads(ran.stdout)
    case.torch_analysis_ms = torch_report["timing_ms"]["total"]
    compare(case, engine, torch_report)
    return case


def compare(case, engine, torch_report):
    fc = torch_report.get("forward_check")
    if fc is None:
        case.failures.append("the script did not compare its forward with the engine's output")
    else:
        case.forward_rel = fc["rel_diff"]
    if fc is not None and not fc["rel_diff"] <= FORWARD_RTOL:
        case.fail(f"forward output (max |diff| / max |output|, tolerance {FORWARD_RTOL:g})", "reference",
                  f"{fc['rel_diff']:.3e} (max |diff| {fc['max_abs_diff']:.3e})")

    eb = {b["param"]: b for b in engine["biases"]}
    tb = {b["param"]: b for b in torch_report["biases"]}
    if list(eb) != list(tb):
        case.fail("bias list", list(eb), list(tb))
    for name in eb:
        if name not in tb:
            continue
        e, t = eb[name], tb[name]
        n, k = e["size"], e["redundant_dim"]
        st = t["structure"]
        if e["verdict"] == "undetermined":
            # Only bounds: torch's answer, when it has one, must lie within them.
            lo, hi = e["redundant_dim_min"], e["redundant_dim_max"]
            tk = t.get("redundant_dim")
            if tk is not None and not lo <= tk <= hi:
                case.fail(f"{name} redundant_dim (of {n}) outside the engine's bounds", f"{lo}-{hi}", tk)
            continue
        if "subspace" in st:
            s = st["subspace"]
            expected = max(0, s - (n - k))
            if st["subspace_nullity"] != expected:
                case.fail(f"{name} nullity on a random {s}-dim subspace (expected max(0, s - n + k))",
                          f"k = {k} -> {expected}", st["subspace_nullity"])
        elif t["redundant_dim"] != k:
            case.fail(f"{name} redundant_dim (of {n})", k, t["redundant_dim"])
        if e["verdict"] != "undetermined" and t["verdict"] == "undetermined" and "subspace" in st:
            # The subspace check only bounds the redundant dimension (at most n - S): the script
            # then says undetermined unless the bias is all redundant; the engine's answer must
            # fit that bound and be a not-all-redundant verdict.
            if e["verdict"] == "redundant" or k > t["redundant_dim_at_most"]:
                case.fail(f"{name} (subspace check: at most {t['redundant_dim_at_most']} of {n}, not all)",
                          f"{e['verdict']}, k = {k}", "undetermined")
            continue
        if t["verdict"] != e["verdict"]:
            values = [f"{r['verdict']} (max |delta| {r['max_abs_delta']}, floor {r['noise_floor']}"
                      f"{', null-space probe ' + json.dumps(r['parts']['redundant_part']) if 'parts' in r else ''})"
                      for r in (e, t)]
            # With 0 < k < n null directions, partly_redundant vs effective is decided by ONE random
            # probe inside the null space; when only that probe differs, both answers are legitimate
            # draws of the engine's method (local redundancy such as units no input activates, where
            # the probe's sign decides; or an effect at rounding level), so it is reported, not failed.
            probe_only = (t.get("redundant_dim") == k and 0 < k < n and {e["verdict"], t["verdict"]} ==
                          {"partly_redundant", "effective"} and "parts" in e and "parts" in t)
            if probe_only:
                case.notes.append(f"verdict of {name} decided by the null-space probe (k = {k} of {n}): "
                                  f"engine {values[0]}, torch {values[1]}")
            else:
                case.fail(f"{name} verdict", *values)

    ef = [(f["rule"], f["where"]) for f in engine["folds"]]
    tf = [(f["rule"], f["where"]) for f in torch_report["folds"]]
    if ef != tf:
        case.fail("folds that apply", ef, tf)
    for e, t in zip(engine["folds"], torch_report["folds"]):
        # A fold the engine says is off here (BatchNorm before a padded convolution) must be off in
        # both, by the same amount; every other fold exact in both.
        expected = "inexact_because" not in e
        same_delta = expected or abs(e["max_abs_delta"] - t["max_abs_delta"]) <= \
            1e-6 * max(1.0, abs(e["max_abs_delta"]))
        if not (e["exact"] == t["exact"] == expected and same_delta):
            case.fail(f"fold {e['rule']} at {', '.join(e['where'])} exact",
                      f"{e['exact']} (max |delta| {e['max_abs_delta']}, floor {e['noise_floor']})",
                      f"{t['exact']} (max |delta| {t['max_abs_delta']}, floor {t['noise_floor']})")
        # The script states the same reason the engine gives.
        if e.get("inexact_because") != t.get("inexact_because"):
            case.fail(f"fold {e['rule']} at {', '.join(e['where'])} reason", e.get("inexact_because"),
                      t.get("inexact_because"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", required=True, help="the biaslab executable")
    parser.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch (default /usr/bin/python3)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="run only cases whose name contains this")
    parser.add_argument("--keep", metavar="DIR", help="keep configs, scripts and weights in DIR")
    args = parser.parse_args()

    probe = run([args.python, "-c", "import torch, numpy"])
    if probe.returncode != 0:
        print(f"skipped: {args.python} cannot import torch and numpy (Debian: apt-get install python3-torch)")
        return 77

    biaslab = os.path.abspath(args.biaslab)
    cases = [Case(n, c) for n, c in preset_cases(biaslab) + configs.generated_configs(biaslab)]
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    work = args.keep or tempfile.mkdtemp(prefix="biaslab-torch-")
    os.makedirs(work, exist_ok=True)
    print(f"torch parity: {len(cases)} experiments, {args.jobs} at a time, files in {work}", flush=True)

    start = time.perf_counter()
    seen_rules, failed = set(), 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(check, case, biaslab, args.python, work) for case in cases]
        for future in futures:
            case = future.result()
            timing = "" if case.torch_s is None else f"  (engine {case.engine_s:.2f} s, torch script {case.torch_s:.2f} s)"
            if case.failures:
                failed += 1
                print(f"FAIL {case.name}{timing}\n  config: {json.dumps(case.config)}")
                for f in case.failures:
                    print(f"  {f}")
            else:
                print(f"ok   {case.name}{timing}")
            for note in case.notes:
                print(f"     note: {note}")
            sys.stdout.flush()
    for case in cases:
        path = os.path.join(work, case.name + ".py")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            seen_rules |= {r for r in FOLD_RULES if f'("{r}"' in text}
    print(f"{len(cases) - failed} of {len(cases)} experiments agree ({time.perf_counter() - start:.0f} s)")
    measured = [c for c in cases if c.forward_rel is not None]
    if measured:
        worst = max(measured, key=lambda c: c.forward_rel)
        print(f"largest forward difference: {worst.forward_rel:.2e} of the largest output ({worst.name})")
    probe_notes = sum(n.startswith("verdict of") for c in cases for n in c.notes)
    if probe_notes:
        print(f"{probe_notes} verdict(s) decided differently by the null-space probe (reported above, not failed)")
    unseen = FOLD_RULES - seen_rules
    if unseen and not args.only:
        print(f"FAIL fold coverage: no experiment exercises {sorted(unseen)}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed or (unseen and not args.only) else 0


if __name__ == "__main__":
    sys.exit(main())
