#!/usr/bin/env python3
"""Golden reports: the engine's full reports (biases, folds, minimal model, invariances, sweep) for
every preset and a stored corpus of random stacks, compared value for value with reports saved
earlier. It guards refactors that must not change behaviour (the layer registry, the split of the
analyses): any difference in any field but the wall-clock timings fails.

    tests/golden/golden.py check BIASLAB            # compare (the test command runs this)
    tests/golden/golden.py make BIASLAB [--count N] # write corpus.json (if absent) and reports.json.gz
    tests/golden/golden.py check web/test/support/engine-cli.mjs --page-engine
                                                    # the page's engine against the same reports

BIASLAB is a built CLI, e.g. build/biaslab. The corpus (corpus.json) is drawn once from the
config schema (`biaslab schema`: every layer type, every option, at small and degenerate sizes:
1 token, 1 feature, batch 1, float32 and float64, nested residual blocks) and then kept, so a new
option in the schema does not change it; `make --new-corpus` draws it again. The reports are
stored gzipped as one JSON object {name: report} with `timing_ms` removed.

Regenerate the reports only for a change that is meant to change answers, and say so in the
commit. A report compares equal when its JSON values are equal: strings, integers, booleans and
the order of arrays exactly; other numbers to RTOL relative; and the numbers that measure rounding
itself as the engine's own noise floor reads them (equate_noise). The engine's doubles are the same
from run to run on one machine and build (the reports are made on one thread), but their last bits
differ between CPUs and builds: the default build is compiled for its CPU (AVX2 or AVX-512, FMA),
Eigen's products block their sums by the CPU's cache sizes, and the math library picks other code
for exp and sin where the CPU has FMA. Every verdict, dimension, rank, fold and minimal model stays
the same; a delta at the level of rounding does not, nor does a measured floor (one sample of the
largest rounding error, which moves by a factor of 2 to 3 between builds).

Exit status: 0 all equal, 1 differences (each printed with its first differing field), 2 usage.
"""
import argparse
import copy
import gzip
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus.json")
REPORTS = os.path.join(HERE, "reports.json.gz")
DROPPED = ("timing_ms",)  # wall-clock fields: the only ones allowed to differ
RTOL = 1e-6
# (A change measured against a floor is not among them: equate_noise reads it against its floor.)
ROUNDING_FIELDS = {"null_sigma_max", "noise_floor", "output_rounding", "noise_floor_redundant"}
ROUNDING_FACTOR = 2.0
# Between builds (equate_noise): a measured floor or rounding moves by up to this factor; a null
# singular value (relative) below NULL_SIGMA_NOISE is rounding (the rank's tolerance is 1e-8); and a
# kept singular value moves by KEPT_RTOL (taken from a Gram matrix's eigenvalues or a Cholesky
# certificate, it carries that matrix's rounding: 1.6e-4 relative seen between two builds).
BUILD_FACTOR = 10.0
NULL_SIGMA_NOISE = 1e-12
KEPT_RTOL = 1e-3
# The sweep measures no floor beyond far = 1e6 x 8 x 2 x the model's rounding (analysis_sweep.cpp).
SWEEP_FAR = 1.6e7
DELTAS = ("max_abs_delta", "mean_abs_delta", "rel_delta")


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _near(a, b, factor):
    """Two non-negative measurements of rounding within `factor` of each other (or both 0)."""
    return a == b or (a > 0 and b > 0 and max(a, b) <= factor * min(a, b))


def _same_span(a, b, tol=1e-6):
    """Two lists of k orthonormal vectors of length n that span the same space: `b`'s vectors are
    orthonormal and each is its own projection on `a`'s span, to `tol`. (The reports carry a basis
    only where it has a few vectors.)"""
    k = len(a)
    if k != len(b) or not all(isinstance(u, list) and len(u) == len(a[0]) and all(map(_num, u)) for u in a + b):
        return False
    n = len(a[0])
    if k * k * n > 2e7:
        return False
    for i in range(k):
        for j in range(k):
            if abs(sum(x * y for x, y in zip(b[i], b[j])) - (i == j)) > tol:
                return False
    for v in b:
        c = [sum(x * y for x, y in zip(u, v)) for u in a]
        if any(abs(v[i] - sum(c[j] * a[j][i] for j in range(k))) > tol for i in range(n)):
            return False
    return True


def equate_noise(a, b, rounding=None):
    """Makes `b` (a new report, in place) take `a`'s value wherever the two differ only as two
    builds' rounding does, read as the engine reads it:
    - a measured change (a bias row's, a fold's, the smallest model's, an invariance probe's, the
      sweep's at each point) with its floor: two changes whose entries may differ by the larger
      floor are the same measurement, each figure held to what that allows (its max and mean to
      the floor, its relative change to floor / mean), and every figure of a change under its
      floor on both sides is rounding;
    - a floor or the output's rounding: within BUILD_FACTOR; a sweep point's floor measured in one
      and not the other where the change is near the point past which none is measured;
    - a null singular value below NULL_SIGMA_NOISE in both; a kept one within KEPT_RTOL;
    - a null basis: the same span (a basis of a null space of two or more dimensions is any
      rotation of another). The sweep's move along it is then another random direction in it,
      whose changes stay under their floors (the first rule);
    - a structure's count of clusters where its rank stayed 0 on every input and its largest null
      singular value is rounding (at most NULL_SIGMA_NOISE, and not exactly zero in both builds):
      the Jacobian is rounding alone, and its columns fall into clusters by which of its entries
      came out exactly zero. (Exactly zero in both, the clusters are its structure.)
    Everything else is left to first_difference."""
    if isinstance(a, list) and isinstance(b, list):
        for x, y in zip(a, b):
            equate_noise(x, y, rounding)
        return
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return
    na, nb = a.get("noise"), b.get("noise")
    if all(isinstance(x, dict) and _num(x.get("output_rounding")) for x in (na, nb)):
        rounding = max(na["output_rounding"], nb["output_rounding"])
        if _near(na["output_rounding"], nb["output_rounding"], BUILD_FACTOR):
            nb["output_rounding"] = na["output_rounding"]
    fa, fb = a.get("noise_floor"), b.get("noise_floor")
    if _num(fa) and _num(fb):
        floor = max(fa, fb)
        # Each entry of a change moves by at most the floor: so do its max and its mean, and its
        # 2-norm by at most the floor times sqrt(n), which relative to that norm (at least sqrt(n)
        # times the mean) is at most floor / mean.
        m = [a.get(k) for k in DELTAS], [b.get(k) for k in DELTAS]
        if all(map(_num, m[0] + m[1])):
            (xa, ma, rel_a), (xb, mb, rel_b) = m
            rounding_only = xa <= fa and xb <= fb
            if rounding_only or abs(xa - xb) <= floor:
                b["max_abs_delta"] = xa
            if rounding_only or abs(ma - mb) <= floor:
                b["mean_abs_delta"] = ma
            if rounding_only or (min(ma, mb) > 0 and abs(rel_a - rel_b) <= 2.0 * max(rel_a, rel_b) * floor / min(ma, mb)):
                b["rel_delta"] = rel_a
        if _near(fa, fb, BUILD_FACTOR):
            b["noise_floor"] = fa
    for delta_key, floor_key in (("delta", "noise_floor"), ("delta_redundant", "noise_floor_redundant")):
        da, db, la, lb = a.get(delta_key), b.get(delta_key), a.get(floor_key), b.get(floor_key)
        if not all(isinstance(x, list) for x in (da, db, la, lb)) or len({len(da), len(db), len(la), len(lb)}) != 1:
            continue
        for i in range(len(da)):
            if _num(la[i]) and _num(lb[i]):
                if _num(da[i]) and _num(db[i]) and abs(da[i] - db[i]) <= max(la[i], lb[i]):
                    db[i] = da[i]
                if _near(la[i], lb[i], BUILD_FACTOR):
                    lb[i] = la[i]
            elif (la[i] is None) != (lb[i] is None) and rounding is not None and _num(da[i]) and _num(db[i]):
                # Near the change past which the engine measures no floor, on both sides, and the
                # two changes within the one floor measured of each other.
                far = SWEEP_FAR * rounding
                measured = la[i] if la[i] is not None else lb[i]
                if far / BUILD_FACTOR <= min(da[i], db[i]) and max(da[i], db[i]) <= far * BUILD_FACTOR \
                        and abs(da[i] - db[i]) <= measured:
                    lb[i] = la[i]
                    db[i] = da[i]
    sa, sb = a.get("null_sigma_max"), b.get("null_sigma_max")
    if _num(sa) and _num(sb) and max(sa, sb) <= NULL_SIGMA_NOISE:
        b["null_sigma_max"] = sa
    ka, kb = a.get("kept_sigma_min"), b.get("kept_sigma_min")
    if _num(ka) and _num(kb) and abs(ka - kb) <= KEPT_RTOL * max(abs(ka), abs(kb)):
        b["kept_sigma_min"] = ka
    ha, hb = a.get("rank_history"), b.get("rank_history")
    if isinstance(ha, list) and ha and ha == hb and not any(ha) and _num(a.get("clusters")) \
            and _num(sa) and _num(sb) and 0 < max(sa, sb) <= NULL_SIGMA_NOISE:
        b["clusters"] = a["clusters"]
    ba, bb = a.get("null_basis"), b.get("null_basis")
    if isinstance(ba, list) and isinstance(bb, list) and ba and ba != bb and _same_span(ba, bb):
        b["null_basis"] = copy.deepcopy(ba)
    for key in a:
        if key in b:
            equate_noise(a[key], b[key], rounding)


def numbers_match(a, b, field):
    """Whether two report numbers agree (see the module's docstring)."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:
        return True
    if field in ROUNDING_FIELDS:
        return a * b > 0 and max(abs(a), abs(b)) <= ROUNDING_FACTOR * min(abs(a), abs(b))
    return abs(a - b) <= RTOL * max(abs(a), abs(b))


def run(biaslab, args, stdin=None):
    # One thread: the native build's matrix products round differently with more (CMakeLists.txt).
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([biaslab] + args, input=stdin, capture_output=True, text=True, check=False, env=env)
    return done.returncode, done.stdout, done.stderr


# The page's memory budget (2^31 bytes), so that reports do not depend on the machine's memory,
# the CLI's default budget.
BUDGET = ["--memory-budget", "2.147483648"]


def analyse(biaslab, entry):
    """The report of one corpus entry (a preset name or a config), timings removed."""
    if "preset" in entry:
        rc, out, err = run(biaslab, ["analyze", "--preset", entry["preset"], "--format", "json"] + BUDGET)
    else:
        rc, out, err = run(biaslab, ["analyze", "-", "--format", "json"] + BUDGET, json.dumps(entry["config"]))
    if not out.strip():
        return {"exit": rc, "stderr": err.strip()[-400:]}
    report = json.loads(out)
    for key in DROPPED:
        report.pop(key, None)
    report["exit"] = rc
    return report


def draw_layer(rng, schema, width, depth):
    """One layer of a type drawn from the schema, every option drawn from its schema entry, kept
    valid for the running width (heads and groups divide it; RoPE needs an even head dimension).
    Returns (layer, width after it)."""
    types = [t for t in schema["layer_types"] if t["name"] != "residual" or depth < 2]
    kind = rng.choice(types)
    if kind["name"] == "residual":
        body, inner = [], width
        for _ in range(rng.randint(1, 3)):
            layer, inner = draw_layer(rng, schema, inner, depth + 1)
            body.append(layer)
        if inner != width:
            body.append({"type": "linear", "out_features": width})
        return {"type": "residual", "body": body}, width
    divisors = [d for d in range(1, width + 1) if width % d == 0]
    layer = {"type": kind["name"]}
    out = width
    for opt in kind["options"]:
        if rng.random() < 0.25:
            continue  # left to its default
        name, typ = opt["name"], opt["type"]
        if typ == "bool":
            layer[name] = rng.random() < 0.5
        elif typ == "enum":
            layer[name] = rng.choice(opt["values"])
        elif typ == "number":
            layer[name] = rng.choice([opt["default"], 1e-3, 0.1, opt.get("max", 1.0)])
        elif name in ("num_heads", "num_groups"):
            layer[name] = rng.choice(divisors)
        elif name == "out_features":
            out = rng.randint(1, 8)
            layer[name] = out
        elif typ == "int":
            layer[name] = rng.randint(opt.get("min", 1), min(opt.get("max", 8), 8))
    if kind["name"] == "attention":
        heads = layer.get("num_heads", 4 if width % 4 == 0 else 1)
        layer["num_heads"] = heads
        if layer.get("rope") and (width // heads) % 2:
            layer["rope"] = False
    if kind["name"] == "groupnorm" and "num_groups" not in layer:
        layer["num_groups"] = rng.choice(divisors)
    return layer, out


def draw_corpus(schema, count, seed=20261123):
    rng = random.Random(seed)
    corpus = []
    for i in range(count):
        width = rng.randint(1, 8)
        shape = {"batch": rng.randint(1, 3), "tokens": rng.randint(1, 5), "features": width}
        layers = []
        for _ in range(rng.randint(1, 4)):
            layer, width = draw_layer(rng, schema, width, 0)
            layers.append(layer)
        corpus.append({"name": f"random-{i:03d}", "config": {
            "version": 1, "seed": i, "dtype": rng.choice(["float32", "float64"]), "shape": shape,
            "layers": layers}})
    return corpus


def entries(biaslab):
    rc, out, _ = run(biaslab, ["presets"])
    presets = [line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith(" ")]
    with open(CORPUS) as f:
        corpus = json.load(f)
    return [{"name": "preset-" + p, "preset": p} for p in presets] + corpus


def first_difference(a, b, path="$", field=""):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return None if numbers_match(a, b, field) else f"{path}: stored {json.dumps(a)[:120]}, now {json.dumps(b)[:120]}"
    if type(a) is not type(b):
        return f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"
    if isinstance(a, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}: only in the {'stored' if key in a else 'new'} report"
            d = first_difference(a[key], b[key], f"{path}.{key}", key)
            if d:
                return d
        if list(a) != list(b):
            return f"{path}: keys in another order"
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]", field)
            if d:
                return d
        return None if len(a) == len(b) else f"{path}: {len(a)} items stored, {len(b)} now"
    if isinstance(a, str) and a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo = max(0, i - 30)
        return f"{path}: from character {i}: stored ...{a[lo:i + 60]!r}, now ...{b[lo:i + 60]!r}"
    if a != b:
        return f"{path}: stored {json.dumps(a)[:120]}, now {json.dumps(b)[:120]}"
    return None


# The stage of the memory bound where the page's engine holds a fold's network compiled
# (cpp/analysis/memory.cpp).
PAGE_FOLD_STAGE = "the network, a fold's copy of it and the copy compiled"
# The most that stage can exceed the CLI's bound by. With P the network's entries and x <= P those
# a fold copies beside it, the page's stage is 8P + max(16x, 8P) bytes and the CLI's fold stage
# 8P + max(12x, 8P) (its float32 copy, 4 bytes an entry): at most 24P against 20P.
PAGE_FOLD_FACTOR = 1.2


def page_engine_bound(stored, now):
    """For --page-engine, the one field that describes the engine rather than the analysis: a wasm
    engine keeps a compiled copy of a fold's network where the CLI lends it the network's values
    (kFoldsLendValues, cpp/analysis/memory.cpp). Where the page's largest stage is that one, its
    bound may be larger than the CLI's, by at most PAGE_FOLD_FACTOR, never smaller, and the two
    are removed from both reports;
    anywhere else they are left to first_difference. Returns a difference, or None."""
    memories = [report.get("work", {}).get("memory") for report in (stored, now)]
    if not all(isinstance(m, dict) for m in memories) or memories[1].get("stage") != PAGE_FOLD_STAGE:
        return None
    a, b = (m.pop("bound", None) for m in memories)
    for m in memories:
        m.pop("stage", None)
    if not (_num(a) and _num(b)):
        return f"$.work.memory.bound: stored {a}, now {b}"
    if b < a:
        return f"$.work.memory.bound: the page's engine {b} under the CLI's {a}"
    if b > PAGE_FOLD_FACTOR * a * (1 + 1e-12):
        return f"$.work.memory.bound: the page's engine {b}, over {PAGE_FOLD_FACTOR} times the CLI's {a}"
    return None


def analyse_all(biaslab, items, jobs):
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(zip([e["name"] for e in items], pool.map(lambda e: analyse(biaslab, e), items)))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["check", "make"])
    parser.add_argument("biaslab")
    parser.add_argument("--count", type=int, default=300, help="random stacks in a new corpus (default 300)")
    parser.add_argument("--new-corpus", action="store_true", help="draw corpus.json again (make only)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--page-engine", action="store_true",
                        help="BIASLAB is the page's wasm engine (check only): its memory bound and stage are its own")
    args = parser.parse_args(argv)
    biaslab = os.path.abspath(args.biaslab)
    if not os.access(biaslab, os.X_OK):
        print(f"golden: {args.biaslab} is not an executable", file=sys.stderr)
        return 2

    if args.command == "make":
        if args.page_engine:
            print("golden: the stored reports are the CLI's; make them with build/biaslab", file=sys.stderr)
            return 2
        if args.new_corpus or not os.path.exists(CORPUS):
            schema = json.loads(run(biaslab, ["schema"])[1])
            with open(CORPUS, "w") as f:
                json.dump(draw_corpus(schema, args.count), f, indent=0)
                f.write("\n")
        items = entries(biaslab)
        reports = analyse_all(biaslab, items, args.jobs)
        text = json.dumps(reports, sort_keys=False, separators=(",", ":"))
        with gzip.GzipFile(REPORTS, "wb", mtime=0) as f:  # mtime 0: the same reports give the same bytes
            f.write(text.encode())
        failed = [n for n, r in reports.items() if r.get("exit") != 0]
        print(f"golden: wrote {len(reports)} reports ({len(text) / 1e6:.1f} MB of JSON, "
              f"{os.path.getsize(REPORTS) / 1e6:.2f} MB gzipped); {len(failed)} exited non-zero"
              + (": " + ", ".join(failed[:8]) if failed else ""))
        return 0

    with gzip.open(REPORTS, "rt") as f:
        stored = json.load(f)
    items = entries(biaslab)
    now = analyse_all(biaslab, items, args.jobs)
    differ = 0
    for name in sorted(set(stored) | set(now)):
        if name not in stored or name not in now:
            differ += 1
            print(f"DIFF {name}: {'new entry (not stored)' if name in now else 'stored, no longer in the corpus'}")
            continue
        d = page_engine_bound(stored[name], now[name]) if args.page_engine else None
        equate_noise(stored[name], now[name])
        d = d or first_difference(stored[name], now[name])
        if d:
            differ += 1
            print(f"DIFF {name}: {d}")
    print(f"golden: {len(now) - differ} of {len(now)} reports match the stored ones"
          + (f"; {differ} differ" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
