"""The analysis of the exported script, first part: the noise floor (Evaluator, compare) and the
structural redundant dimension of one bias (structure). Always emitted, followed by report.py.
"""
from .head import copy, math, torch, fwAD, nn, jacobian, functional_call
from .head import SEED, DTYPE, BATCH, TOKENS, FEATURES, CONTEXT_TOKENS

# @export analysis


# =============================================================================================
# The analysis: biaslab's report fields (format 1)
# =============================================================================================
FLOOR_FACTOR = 8.0            # a difference is real only above 8 x (rounding of one side + of the other)
ROUNDOFF_RATIO = 2.0 ** -29   # 2^-52 / 2^-23: carries a rounding measured in float32 to float64
STRUCTURE_RTOL = 1e-8         # a singular value <= 1e-8 x the reference scale is null,
ROUNDING_RANK = 32 * 2.0 ** -53  # and so is one <= 32 unit roundoffs of the output's norm (rounding)
MIN_SAMPLES = 2               # inputs stacked at least, before "the rank stopped growing" counts
KINK_PATIENCE = 64            # with a ReLU on the way: inputs in a row that add no rank and activate no new unit
VANISH_RTOL = 1e-13           # a tangent at most this x its reference scale is rounding


class Evaluator:
    """One model in float32 and in float64 on the same values, and one input. run() gives the
    output in the experiment's dtype and its rounding error, measured as max |y32 - y64| (for
    float64 scaled by 2^-29: the network's measured sensitivity to rounding, at float64)."""

    def __init__(self, model64, x64):
        self.model32 = copy.deepcopy(model64).float()
        self.model64 = copy.deepcopy(self.model32).double() if DTYPE is torch.float32 else model64
        self.x32 = x64.float()
        self.x64 = self.x32.double() if DTYPE is torch.float32 else x64

    def run(self, name=None, value=None):
        """The forward with parameter `name` replaced by `value` (float64)."""
        with torch.no_grad():
            o32 = {name: value.float()} if name else {}
            o64 = {name: value.float().double() if DTYPE is torch.float32 else value} if name else {}
            y32 = functional_call(self.model32, o32, (self.x32,)).double()
            y64 = functional_call(self.model64, o64, (self.x64,))
        finite = bool(torch.isfinite(y32).all() and torch.isfinite(y64).all())
        diff = (y32 - y64).abs().max().item() if finite else 0.0
        # Never below one unit roundoff of the largest output.
        last = (2.0 ** -24 if DTYPE is torch.float32 else 2.0 ** -53) * (y64.abs().max().item() if finite else 0.0)
        ymax = y64.abs().max().item() if finite else 0.0
        if DTYPE is torch.float32:
            return {"y": y32, "other": y64, "rounding": max(diff, last),
                    "rounding_other": max(diff * ROUNDOFF_RATIO, 2.0 ** -53 * ymax), "finite": finite}
        return {"y": y64, "other": y32, "rounding": max(diff * ROUNDOFF_RATIO, last),
                "rounding_other": max(diff, 2.0 ** -24 * ymax), "finite": finite}


def compare(a, b):
    """max |b - a| against the noise floor 8 (r_a + r_b); for float64, when the same difference taken
    in float32 is itself below float32's floor, at least 8 x 2^-29 x that difference (its rounding
    noise, conditioning included). Never a fixed tolerance."""
    floor = FLOOR_FACTOR * (a["rounding"] + b["rounding"])
    finite = a["finite"] and b["finite"]
    if finite and DTYPE is torch.float64:
        d32 = (b["other"] - a["other"]).abs().max().item()
        if d32 <= FLOOR_FACTOR * (a["rounding_other"] + b["rounding_other"]):
            floor = max(floor, FLOOR_FACTOR * ROUNDOFF_RATIO * d32)
    max_abs = (b["y"] - a["y"]).abs().max().item() if finite else None
    return {"max_abs_delta": max_abs, "noise_floor": floor,
            "above_floor": (not finite) or max_abs > floor}


class StructuralInputs:
    """Independent N(0, 1) inputs for the structural analysis, shared by all biases: the engine's
    own first K when the weights file has them (`structure_inputs`), else the analysed input
    first (as in the engine: the null basis is then accurate at the input the verdict moves the
    bias on); then drawn by torch."""

    def __init__(self, seed, given=None):
        self.generator = torch.Generator().manual_seed(seed)
        self.inputs = [] if given is None else [x.to(torch.float64) for x in given]

    def get(self, k):
        while len(self.inputs) <= k:
            self.inputs.append(torch.randn(BATCH, TOKENS + CONTEXT_TOKENS, FEATURES, generator=self.generator,
                                           dtype=torch.float64))
        return self.inputs[k]


def per_token_response(model, owner, x, direction, sinks=False):
    """d(output) for a perturbation `direction` (B, T, n) added to `owner`'s output (where its bias
    enters), different for every token: the reference scale of a visible effect. For attention
    sinks (`sinks`), added to each query token's sink logits instead."""
    with fwAD.dual_level():
        delta = fwAD.make_dual(torch.zeros_like(direction), direction)
        if sinks:
            owner.sink_offset = delta
        else:
            # a per-head norm's output is (B, T, heads, d): its bias direction reaches every head
            handle = owner.register_forward_hook(
                lambda module, inputs, out: out + (delta.unsqueeze(-2) if out.dim() == delta.dim() + 1 else delta))
        try:
            tangent = fwAD.unpack_dual(model(x)).tangent
        finally:
            if sinks:
                owner.sink_offset = None
            else:
                handle.remove()
    return torch.zeros(1, dtype=torch.float64) if tangent is None else tangent


def relus_after(model, owner):
    """The ReLU modules that run after `owner` (modules are registered in the order they run)."""
    modules = list(model.modules())
    at = next(i for i, mod in enumerate(modules) if mod is owner)
    return [mod for mod in modules[at + 1:] if isinstance(mod, nn.ReLU)]


def capture_inputs(modules):
    """Forward hooks that keep each module's last input; returns (store, remove)."""
    store = [None] * len(modules)
    handles = [mod.register_forward_hook(lambda module, inputs, out, i=i: store.__setitem__(i, inputs[0]))
               for i, mod in enumerate(modules)]
    return store, lambda: [h.remove() for h in handles]


def null_vanishes_before(model, name, relu, x, V):
    """Whether the tangent of every column of V (bias directions) is rounding at the input of
    `relu`: then the map up to there, analytic in the input, cancels them for every input."""
    bias = model.get_parameter(name).detach()
    store, remove = capture_inputs([relu])
    try:
        def at_relu(c):  # c: the bias flat (a position table's rows one after another)
            functional_call(model, {name: c.view_as(bias)}, (x,))
            return store[0].reshape(-1)
        J = jacobian(at_relu, bias.reshape(-1), vectorize=True, strategy="forward-mode")  # (N*w, n)
    finally:
        remove()
    n = bias.numel()
    owner = model.get_submodule(name.rsplit(".", 1)[0])
    rows = CONTEXT_TOKENS if getattr(owner, "READS_CONTEXT", False) else TOKENS  # where the bias enters
    reference = J.norm().item() * math.sqrt(x.shape[0] * rows / n)
    return bool((J @ V).norm(dim=0).max().item() <= VANISH_RTOL * reference) if V.shape[1] else True


def structure(model, name, inputs, max_samples, subspace=None):
    """The redundant dimension of bias `name`: the nullity of d(output)/d(bias) stacked over
    independent inputs until a stopping rule holds (one input can fake null directions: with few
    tokens a head sees only T-1 key differences). Only the triangular factor R of the stacked
    Jacobian is kept (R^T R = J^T J); singular values of R below STRUCTURE_RTOL x the reference
    scale, or below ROUNDING_RANK x the output's norm (over the stacked inputs), are null: as in
    the engine, rounding is never rank, even where the reference itself underflows. The rules, as in the engine: full rank ends the loop; without a ReLU on the
    way one input that adds no rank does (the Jacobian is analytic in the input); with one, a run
    of KINK_PATIENCE inputs (and twice the longest earlier run) that add no rank and activate no
    ReLU unit for the first time, unless the null directions vanish before every ReLU. When
    max_samples runs out first the answer is undetermined: only bounds.

    With `subspace` = s < n (wide layers, where the full Jacobian is slow) only a random
    s-dimensional subspace P of the bias is analysed. Its nullity is generically max(0, s - rank),
    so the redundant dimension is exact when it exceeds n - s and otherwise only bounded by n - s."""
    bias = model.get_parameter(name).detach()
    owner = model.get_submodule(name.rsplit(".", 1)[0])
    n = bias.numel()
    table = getattr(owner, "TABLE", False)  # a position table (T, F): analysed flat, as a bias of T * F
    generator = torch.Generator().manual_seed(SEED + 3)
    if subspace and subspace < n:
        P = torch.linalg.qr(torch.randn(n, subspace, generator=generator, dtype=torch.float64)).Q  # (n, s)
        at, to_bias = torch.zeros(subspace, dtype=torch.float64), lambda c: bias + (P @ c).view_as(bias)
    else:
        P, at, to_bias = None, bias.reshape(-1), lambda b: b.view_as(bias)
    m = at.numel()
    relus = relus_after(model, owner)
    active = [None] * len(relus)
    R, ranks, reference_sq, output_sq = None, [], 0.0, 0.0
    run = longest = 0
    vanishes, rule = None, "budget"
    for k in range(max_samples):
        x = inputs.get(k)
        J = jacobian(lambda c: functional_call(model, {name: to_bias(c)}, (x,)).reshape(-1), at,
                     vectorize=True, strategy="forward-mode")  # (B*T*F_out, m)
        store, remove = capture_inputs(relus)
        try:
            with torch.no_grad():
                output_sq += model(x).pow(2).sum().item()
        finally:
            remove()
        new_units = False
        for i, seen in enumerate(store):
            now = (seen.reshape(-1, seen.shape[-1]) > 0).any(dim=0).long()
            if active[i] is not None and bool(((now > 0) & (active[i] == 0)).any()):
                new_units = True
            active[i] = now if active[i] is None else active[i] + now
        # A table's entry at a token is the row of its position: the token's direction has F entries.
        width = bias.shape[-1] if table else n
        # k_proj, v_proj and k_norm of cross-attention have a row per context token
        rows = CONTEXT_TOKENS if getattr(owner, "READS_CONTEXT", False) else TOKENS
        direction = torch.randn(BATCH, rows, width, generator=generator, dtype=torch.float64) / math.sqrt(n)
        reference_sq += per_token_response(model, owner, x, direction, name.endswith("sinks")).pow(2).sum().item()
        R = torch.linalg.qr(J if R is None else torch.cat([R, J]), mode="r").R
        tau = max(STRUCTURE_RTOL * math.sqrt(reference_sq), ROUNDING_RANK * math.sqrt(output_sq))
        sigma = torch.linalg.svdvals(R)
        ranks.append(int((sigma > tau).sum()))
        gained = ranks[-1] > (ranks[-2] if len(ranks) > 1 else 0)
        if ranks[-1] == m:
            rule = "full_rank"
            break
        if relus and not gained and vanishes is None and P is None:
            Vh = torch.linalg.svd(R, full_matrices=True)[2]
            # Every ReLU: a skip or a parallel sum carries the tangent past an earlier one, and a
            # ReLU in a later branch of the bias's parallel block sees none of it.
            vanishes = all(null_vanishes_before(model, name, relu, x, Vh[ranks[-1]:].T) for relu in relus)
        kinked = bool(relus) and not vanishes
        if gained or (new_units and not vanishes):
            longest, run = max(longest, run), 0
        else:
            run += 1
        # The rarest unit some input activated sets how long a run must be to meet what only it passes.
        rarest = min([c.item() / (k + 1) for a in active for c in a if c > 0], default=1.0)
        needed = max(KINK_PATIENCE, 2 * longest, math.ceil(3 / rarest)) if kinked else 1
        if not gained and k + 1 >= MIN_SAMPLES and run >= needed:
            rule = "no_gain_kinked" if kinked else "no_gain"
            break
    rank = ranks[-1]
    _, sigma, Vh = torch.linalg.svd(R, full_matrices=True)
    reference = math.sqrt(reference_sq)
    kept, null = sigma[:rank], sigma[rank:]
    out = {"redundant_dim": m - rank, "redundant_dim_min": m - rank, "redundant_dim_max": m - rank,
           "null_basis": Vh[rank:].T, "samples": len(ranks), "rank_history": ranks, "stop_rule": rule,
           "null_sigma_max": (null.max().item() / reference) if len(null) and reference > 0 else 0.0,
           "kept_sigma_min": (kept.min().item() / reference) if rank and reference > 0 else 0.0}
    inactive = sum(int((a == 0).sum()) for a in active if a is not None)
    if rule == "budget":
        out.update({"redundant_dim": None, "redundant_dim_min": 0, "redundant_dim_max": m - rank})
    elif rule == "no_gain_kinked" and inactive and m - rank > 0 and P is None:
        # Units no input activated: dead (their directions are redundant) or rare (they are not).
        out.update({"redundant_dim": None, "redundant_dim_min": max(0, m - rank - inactive),
                    "redundant_dim_max": m - rank, "inactive_units": inactive})
    if P is not None:
        nullity = m - rank
        out["null_basis"] = P @ out["null_basis"]
        out["subspace"], out["subspace_nullity"] = m, nullity
        out["redundant_dim"] = n - m + nullity if nullity > 0 and rule != "budget" else None
        if out["redundant_dim"] is None:
            out["redundant_dim_at_most"] = n - m + nullity
    return out
