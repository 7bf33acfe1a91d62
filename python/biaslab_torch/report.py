"""The analysis of the exported script, second part: verdicts per bias, folds, the report and
main(). Always emitted last, right after analysis.py.
"""
from .head import argparse, copy, json, math, time, torch
from .head import CONFIG, TITLE, SEED, FOLDS, build_model
from .analysis import Evaluator, StructuralInputs, compare, structure
from .weights import read_safetensors, load_experiment, structure_inputs, draw_experiment, round_to_dtype

# @export report


def snap_null_basis(B, rows=1):
    """B (n, k) with the vectors constant over each of `rows` equal parts (the all-ones direction;
    for a position table, each position's row) put in exactly when they lie in span(B) (to 1e-6): a
    basis from computed Jacobians is only as accurate as their rounding (one token into a
    LayerNorm leaves it 1e-11 off), enough for a move along it to show above the floor."""
    n, k = B.shape
    for parts in dict.fromkeys((rows, 1)):  # the wider candidate first
        Q = torch.kron(torch.eye(parts, dtype=B.dtype), torch.ones(n // parts, 1, dtype=B.dtype)) / math.sqrt(n // parts)
        if k == 0 or k == n or parts > k or (Q - B @ (B.T @ Q)).norm().item() > 1e-6 * math.sqrt(parts):
            continue
        rest = torch.linalg.svd(B - Q @ (Q.T @ B), full_matrices=False)[0][:, :k - parts]
        return torch.cat([Q, rest], dim=1)
    return B


def unit_rms(v):
    """v scaled to RMS 1 per entry (so "size s" means entries of about s)."""
    return v * (math.sqrt(v.numel()) / v.norm())


def verdict_for(k, n):
    return "redundant" if k == n else "effective" if k == 0 else "partly_redundant"


def analyse_biases(model, evaluator, max_samples, given_inputs=None, subspace=None):
    """Per bias: structural redundant dimension, a random perturbation of RMS 1 per entry against
    the noise floor, and the verdict (a full perturbation below the floor: redundant; else, with
    0 < k < n null directions, a perturbation inside the null space decides partly_redundant)."""
    rows = []
    base = evaluator.run()
    inputs = StructuralInputs(SEED + 1, given_inputs if given_inputs is not None else [evaluator.x64])
    generator = torch.Generator().manual_seed(SEED + 2)
    for name, p in model.named_parameters():
        # Attention sinks and position tables are bias-like rows too.
        table = getattr(model.get_submodule(name.rsplit(".", 1)[0]), "TABLE", False)
        if name.rsplit(".", 1)[-1] not in ("bias", "sinks") and not table:
            continue
        n = p.numel()
        st = structure(model, name, inputs, max_samples, subspace)
        k = st["redundant_dim"]
        undetermined = st["redundant_dim"] is None and "subspace" not in st
        u = unit_rms(torch.randn(n, generator=generator, dtype=torch.float64)).view_as(p)
        full = compare(base, evaluator.run(name, p.detach() + u))
        row = {"param": name, "size": n, "redundant_dim": k,
               "redundant_dim_min": st["redundant_dim_min"], "redundant_dim_max": st["redundant_dim_max"]}
        parts = {}
        if undetermined:
            verdict = "undetermined"
        elif not full["above_floor"]:
            verdict = "redundant"
        elif k is not None and 0 < k < n:
            B = snap_null_basis(st["null_basis"], p.shape[0] if table else 1)
            g = torch.randn(B.shape[1], generator=generator, dtype=torch.float64)
            u = unit_rms(B @ g).view_as(p)
            # Both signs: an inactive ReLU unit cancels a push down but not a push up.
            plus = compare(base, evaluator.run(name, p.detach() + u))
            minus = compare(base, evaluator.run(name, p.detach() - u))
            # The same rounding measured twice: both moves take the larger floor.
            floor = max(plus["noise_floor"], minus["noise_floor"])
            for d in (plus, minus):
                d["noise_floor"] = floor
                d["above_floor"] = d["max_abs_delta"] is None or d["max_abs_delta"] > floor
            inside = plus if plus["above_floor"] or not minus["above_floor"] else minus
            parts["redundant_part"] = {key: inside[key] for key in ("max_abs_delta", "noise_floor")}
            verdict = "effective" if inside["above_floor"] else "partly_redundant"
        elif k is None:
            # Only bounded by the subspace check (at most n - S redundant directions): the move shows
            # the bias is not all redundant, but whether some directions are is not known.
            undetermined, verdict = True, "undetermined"
        else:
            verdict = "effective"
        if not undetermined and st["stop_rule"] == "no_gain_kinked" and k and verdict == "effective":
            shown = parts["redundant_part"] if parts else full
            moved = float("inf") if shown["max_abs_delta"] is None else shown["max_abs_delta"]
            # As in the engine: a finite move acts along null directions that a ReLU's stopping rule
            # left, so inputs the sample did not reach may act along them too; only bounds hold.
            undetermined, verdict = True, "undetermined"
            row.update({"redundant_dim": None, "redundant_dim_min": 0, "redundant_dim_max": k})
            kinked_note = (f"a finite move along the {k} null direction{'' if k == 1 else 's'} found over "
                           f"{st['samples']} inputs changes the output (max |delta| {moved:.3g} "
                           f"against a floor of {shown['noise_floor']:.3g}); a ReLU lies on the way, so inputs the "
                           f"sample did not reach may act along them: the rank found, {n - k} of {n}, is certain, "
                           f"the rest is not")
            st["kinked_note"] = kinked_note
        row["verdict"] = verdict
        row["max_abs_delta"] = full["max_abs_delta"]
        row["noise_floor"] = full["noise_floor"]
        bounded = k is None and "subspace" in st  # only bounded by the subspace check
        if bounded:
            row["redundant_dim_at_most"] = st["redundant_dim_at_most"]
        row["consistent"] = None if undetermined or bounded else verdict == verdict_for(k, n)
        if undetermined:
            row["undetermined_reason"] = (
                f"--structure-subspace {st['subspace']}: a random {st['subspace']}-dimensional subspace of the bias "
                f"has no null direction, so at most {st['redundant_dim_at_most']} of {n} are redundant; a full move "
                f"changes the output, so not all are" if bounded else
                st["kinked_note"] if "kinked_note" in st else
                f"{st['inactive_units']} ReLU unit(s) were never active: dead or only rarely active, which sampling "
                f"cannot tell apart" if "inactive_units" in st else
                f"{max_samples} inputs (--max-samples) ran out before a stopping rule held: "
                f"the rank found, {n - st['redundant_dim_max']} of {n}, is a lower bound")
        if parts:
            row["parts"] = parts
        row["structure"] = {key: st[key] for key in ("samples", "rank_history", "stop_rule", "null_sigma_max",
                                                     "kept_sigma_min", "subspace", "subspace_nullity") if key in st}
        rows.append(row)
    return rows


def analyse_folds(model, evaluator):
    """Each fold on a copy of the float64 model, compared with the original against the floor."""
    rows = []
    base = evaluator.run()
    for rule, where, apply, caveat in FOLDS:
        folded = copy.deepcopy(model)
        with torch.no_grad():
            apply(folded)
        d = compare(base, Evaluator(folded, evaluator.x64).run())
        rows.append({"rule": rule, "where": where, "exact": not d["above_floor"],
                     "max_abs_delta": d["max_abs_delta"], "noise_floor": d["noise_floor"]})
        if caveat:  # the engine expects this rewrite to be off (e.g. zero padding at the borders)
            rows[-1]["inexact_because"] = caveat
    return rows


def forward_check(model, x, output):
    """The float64 forward against the engine's output (float64, on the same stored values)."""
    with torch.no_grad():
        y = model(x)
    diff = (y - output.to(torch.float64)).abs().max().item()
    scale = output.abs().max().item()
    return {"max_abs_diff": diff, "max_abs_output": scale, "rel_diff": diff / scale if scale > 0 else diff}


def fmt(v):
    return "n/a" if v is None else f"{v:.2e}"


def print_table(report):
    print(f"{TITLE} in PyTorch {torch.__version__} ({report['config']['dtype']}, {report['source']})")
    if "forward_check" in report:
        fc = report["forward_check"]
        print(f"float64 forward vs the engine's output: max |diff| {fmt(fc['max_abs_diff'])} "
              f"(relative {fmt(fc['rel_diff'])})")
    print("\nmax |delta|: a random move of RMS 1 drawn by this script (not the engine's direction), so its"
          "\nvalues differ from the engine's; redundant dimensions and verdicts are what should agree.")
    print(f"\n{'bias':<36} {'size':>6} {'redundant':>14}  {'verdict':<17} {'max |delta|':>11} {'noise floor':>11}")
    for b in report["biases"]:
        k = b["redundant_dim"]
        if k is not None:
            red = f"{k} of {b['size']}"
        elif "redundant_dim_at_most" in b:
            red = f"<={b['redundant_dim_at_most']} of {b['size']}"
        elif b["verdict"] == "undetermined":
            red = f"{b['redundant_dim_min']}-{b['redundant_dim_max']} of {b['size']}"
        else:
            red = f"<={b['redundant_dim_at_most']} of {b['size']}"
        print(f"{b['param']:<36} {b['size']:>6} {red:>14}  {b['verdict']:<17} {fmt(b['max_abs_delta']):>11} {fmt(b['noise_floor']):>11}")
    if report["folds"]:
        print(f"\n{'fold':<28} {'where':<36} {'exact':<6} {'max |delta|':>11} {'noise floor':>11}")
        for f in report["folds"]:
            print(f"{f['rule']:<28} {', '.join(f['where']):<36} {'yes' if f['exact'] else 'NO':<6} "
                  f"{fmt(f['max_abs_delta']):>11} {fmt(f['noise_floor']):>11}")
        for f in report["folds"]:
            if not f["exact"]:
                print(f"  {f['rule']} at {', '.join(f['where'])} is not exact: "
                      f"{f.get('inexact_because', 'unexpected (the engine expects it to be exact)')}")
    t = report["timing_ms"]
    print(f"\nanalysis {t['total']:.0f} ms (biases {t['biases']:.0f} ms, folds {t['folds']:.0f} ms)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=TITLE + ": biaslab's analysis in PyTorch.")
    parser.add_argument("weights", nargs="?", help="a .safetensors file from `biaslab export-torch --weights` "
                        "(parameters, buffers, input and the engine's output); without it, torch draws them")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--max-samples", type=int, default=4096,
                        help="most inputs stacked per bias in the structural analysis (default 4096); a bias "
                        "whose stopping rule has not held by then is undetermined, with bounds")
    parser.add_argument("--structure-subspace", type=int, metavar="S",
                        help="for biases wider than S, analyse only a random S-dimensional subspace "
                        "(fast for wide layers; the redundant dimension is then exact only above n - S)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = build_model().double()
    output = given_inputs = None
    if args.weights:
        tensors = read_safetensors(args.weights)
        x = load_experiment(model, tensors, args.weights)
        output = tensors.get("output")
        given_inputs = structure_inputs(tensors, args.weights)
        source = "weights and input from " + args.weights
    else:
        x = draw_experiment(model, SEED)
        source = f"weights and input drawn by torch, seed {SEED}"
    x = round_to_dtype(model, x)
    for p in model.parameters():
        p.requires_grad_(False)

    start = time.perf_counter()
    evaluator = Evaluator(model, x)
    base = evaluator.run()
    biases = analyse_biases(model, evaluator, args.max_samples, given_inputs, args.structure_subspace)
    after_biases = time.perf_counter()
    folds = analyse_folds(model, evaluator)
    end = time.perf_counter()

    report = {"ok": True, "format": 1, "source": source, "torch_version": torch.__version__,
              "config": CONFIG,
              "noise": {"dtype": CONFIG.get("dtype", "float64"), "output_rounding": base["rounding"],
                        "output_max_abs": base["y"].abs().max().item()},
              "biases": biases, "folds": folds,
              "timing_ms": {"biases": 1e3 * (after_biases - start), "folds": 1e3 * (end - after_biases),
                            "total": 1e3 * (end - start)}}
    if output is not None:
        report["forward_check"] = forward_check(evaluator.model64, evaluator.x64, output)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
