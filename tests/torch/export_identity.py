#!/usr/bin/env python3
"""The exported PyTorch scripts, byte for byte: `biaslab export-torch` for every preset, the
regression cases (cases/*.json), the fuzz corpus, the parity suite's generated configs
(configs.py) and the degenerate suite's stacks (degenerate.py, its default seeded plan), hashed
into a manifest. Moving the script's Python between files (python/biaslab_torch/) or rewriting
the C++ that assembles it must not change one byte; a deliberate change of the script
regenerates the manifest with --update and shows up in its diff.

    python3 tests/torch/export_identity.py --biaslab build/biaslab            # compare (exit 1 on a difference)
    python3 tests/torch/export_identity.py --biaslab build/biaslab --update   # rewrite the manifest
    python3 tests/torch/export_identity.py --biaslab build/biaslab --save DIR  # the scripts themselves, for diff -r

Needs only the standard library (no torch). The version line ("Exported by biaslab X.Y.Z") is
hashed as "Exported by biaslab VERSION", so a version bump does not touch the manifest.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "export_identity.txt")
DEGENERATE_COUNT, DEGENERATE_SEED = 150, 1  # the plan ctest's torch_degenerate runs

sys.path.insert(0, HERE)
import configs  # noqa: E402
import degenerate  # noqa: E402


def run(cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True)


def cases(biaslab):
    """[(name, args, stdin)] for `biaslab export-torch ... -o -`."""
    out = []
    listing = run([biaslab, "presets"]).stdout
    for name in [line.split()[0] for line in listing.splitlines() if line and not line[0].isspace()]:
        out.append(("preset:" + name, ["--preset", name], None))
    files = sorted(glob.glob(os.path.join(HERE, "cases", "*.json")))
    files += sorted(glob.glob(os.path.join(ROOT, "fuzz", "corpus", "analyze", "*")))
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            out.append((os.path.relpath(path, ROOT), ["-"], f.read()))
    for name, config in configs.generated_configs(biaslab):
        out.append(("parity:" + name, ["-"], json.dumps(config)))
    eps_max = degenerate.eps_limits(biaslab)
    families = degenerate.FAMILIES
    for index, family in enumerate(families):
        count = DEGENERATE_COUNT // len(families) + (index < DEGENERATE_COUNT % len(families))
        for i in range(count):
            seed = DEGENERATE_SEED * 1000000 + i
            out.append((f"degenerate:{family}:{seed}", ["-"], json.dumps(degenerate.make_config(family, seed, eps_max))))
    return out


def export(biaslab, args, stdin):
    """The script, or the error the CLI printed (an invalid config is a result too)."""
    r = run([biaslab, "export-torch", *args, "-o", "-"], stdin)
    return r.stdout if r.returncode == 0 else f"exit {r.returncode}\n{r.stderr}"


def digest(text):
    text = re.sub(r"Exported by biaslab [0-9][^ ]*", "Exported by biaslab VERSION", text, count=1)
    return hashlib.sha256(text.encode()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--biaslab", required=True)
    parser.add_argument("--update", action="store_true", help="rewrite the manifest instead of comparing")
    parser.add_argument("--save", metavar="DIR", help="also write every script to DIR")
    args = parser.parse_args()

    results = {}
    for name, cli_args, stdin in cases(os.path.abspath(args.biaslab)):
        text = export(args.biaslab, cli_args, stdin)
        results[name] = digest(text)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, name.replace("/", "_").replace(":", "_") + ".py"), "w") as f:
                f.write(text)
    lines = [f"{h}  {name}\n" for name, h in results.items()]
    if args.update:
        with open(MANIFEST, "w") as f:
            f.write("# sha256 of `biaslab export-torch` per config: tests/torch/export_identity.py --update\n")
            f.writelines(lines)
        print(f"wrote {len(lines)} digests to {os.path.relpath(MANIFEST, ROOT)}")
        return 0
    with open(MANIFEST) as f:
        expected = dict(reversed(line.rstrip("\n").split("  ", 1)) for line in f if not line.startswith("#"))
    differ = [n for n in results if expected.get(n) != results[n]]
    gone = [n for n in expected if n not in results]
    for n in differ:
        print(f"DIFFERS {n}" if n in expected else f"NEW     {n}")
    for n in gone:
        print(f"MISSING {n}")
    print(f"{len(results) - len(differ)} of {len(results)} exported scripts identical to the manifest"
          f"{f', {len(gone)} manifest entries not produced' if gone else ''}")
    return 1 if differ or gone else 0


if __name__ == "__main__":
    sys.exit(main())
