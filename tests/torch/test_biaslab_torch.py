#!/usr/bin/python3
"""The exported script's Python, imported directly from python/biaslab_torch/ (the same text the
build embeds): layer classes against torch.nn or their formula, fold helpers leaving the output
unchanged, the noise floor (compare), snap_null_basis, unit_rms, and structure()'s stopping rules
on tiny models. Every tolerance is named where it is used, and failures print what was measured.

    /usr/bin/python3 tests/torch/test_biaslab_torch.py [unittest options]
Exit status 77 (skipped) when torch or numpy cannot be imported.
"""
import importlib
import math
import os
import sys
import unittest

try:
    importlib.import_module("numpy")  # head.py imports it
    import torch
    from torch import nn
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import torch and numpy ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import biaslab_torch as bt  # noqa: E402
from biaslab_torch import analysis, folds, layers, layers_one_token, report, weights  # noqa: E402

EXACT64 = 1e-12  # float64 rewrites of the same function: differences are rounding only


def shape(batch, tokens, features, seed=0, dtype=torch.float64):
    """Sets the generated names for an experiment of this shape; returns an N(0, 1) input."""
    bt.configure(SEED=seed, DTYPE=dtype, BATCH=batch, TOKENS=tokens, FEATURES=features)
    return torch.randn(batch, tokens, features, generator=torch.Generator().manual_seed(seed + 100),
                       dtype=torch.float64)


def randomise(model, seed=1):
    """Every parameter and buffer U(0.5, 1.5) (positive: valid running variances), biases signed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            t.copy_(torch.rand(t.shape, generator=g, dtype=torch.float64) + 0.5)
            if name.endswith("bias"):
                t.sub_(1.0)
    return model


def max_diff(a, b):
    return (a - b).abs().max().item()


class Layers(unittest.TestCase):
    def test_attention_matches_multihead_attention(self):
        """Attention: equals torch.nn.MultiheadAttention with the same projections, causal or not"""
        x = shape(2, 5, 8)
        for causal in (False, True):
            ours = randomise(layers.Attention(8, num_heads=2, causal=causal).double())
            ref = nn.MultiheadAttention(8, 2, batch_first=True).double()
            with torch.no_grad():
                ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
                ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
                ref.out_proj.weight.copy_(ours.o_proj.weight)
                ref.out_proj.bias.copy_(ours.o_proj.bias)
                mask = torch.ones(5, 5, dtype=torch.bool).triu(1) if causal else None
                d = max_diff(ours(x), ref(x, x, x, attn_mask=mask, need_weights=False)[0])
            self.assertLessEqual(d, EXACT64, f"causal={causal}: max |diff| {d:.3e}")

    def test_cross_attention_matches_multihead_attention_on_the_context(self):
        """Attention with context_tokens: nn.MultiheadAttention(query=x, key=value=context) with
        kdim = vdim = the context's width; Net takes the context after each sample's tokens"""
        shape(2, 3, 6)
        bt.configure(CONTEXT_TOKENS=5)
        try:
            g = torch.Generator().manual_seed(7)
            x = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
            context = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
            ours = randomise(layers.Attention(8, num_heads=2, context_tokens=5, context_size=6).double())
            self.assertEqual(tuple(ours.k_proj.weight.shape), (8, 6))
            self.assertEqual(ours.READS, ("q_proj",))
            ref = nn.MultiheadAttention(8, 2, batch_first=True, kdim=6, vdim=6).double()
            with torch.no_grad():
                ref.q_proj_weight.copy_(ours.q_proj.weight)
                ref.k_proj_weight.copy_(ours.k_proj.weight)
                ref.v_proj_weight.copy_(ours.v_proj.weight)
                ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
                ref.out_proj.weight.copy_(ours.o_proj.weight)
                ref.out_proj.bias.copy_(ours.o_proj.bias)
                expected = ref(x, context, context, need_weights=False)[0]
                ours.context = context
                d = max_diff(ours(x), expected)
                self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")
                # Net: the input (B, 3, 6) then the context (B, 5, 6) along the tokens.
                lift = randomise(nn.Linear(6, 8).double(), seed=3)
                net = layers.Net([lift, ours])
                ours.context = None
                y = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
                dn = max_diff(net(torch.cat([y, context], dim=1)), ref(lift(y), context, context, need_weights=False)[0])
                self.assertLessEqual(dn, EXACT64, f"through Net: max |diff| {dn:.3e}")
        finally:
            bt.configure(CONTEXT_TOKENS=0)

    def test_draw_experiment_draws_sinks_and_a_context(self):
        """draw_experiment: attention sinks drawn as shifts, U(-0.5, 0.5); the input carries the context"""
        shape(2, 3, 8)
        bt.configure(CONTEXT_TOKENS=4)
        try:
            model = layers.Net([layers.Attention(8, 2, sinks=True, context_tokens=4, context_size=8)]).double()
            x = weights.draw_experiment(model, 5)
            self.assertEqual(tuple(x.shape), (2, 3 + 4, 8))
            sinks = model.layers[0].sinks
            self.assertTrue(bool((sinks.abs() <= 0.5).all()) and bool((sinks != 0).all()), f"sinks {sinks.tolist()}")
        finally:
            bt.configure(CONTEXT_TOKENS=0)

    def test_grouped_query_attention_repeats_each_kv_head_to_its_group(self):
        """Attention: num_kv_heads equals multi-head attention whose k/v rows repeat per group (repeat_kv)"""
        x = shape(2, 5, 16)
        for kv, rope in ((2, False), (1, True)):
            grouped = randomise(layers.Attention(16, 4, num_kv_heads=kv, rope=rope).double())
            full = layers.Attention(16, 4, rope=rope).double()
            group, d = 4 // kv, 4
            with torch.no_grad():
                for name in ("q_proj", "o_proj"):
                    getattr(full, name).load_state_dict(getattr(grouped, name).state_dict())
                for name in ("k_proj", "v_proj"):
                    g, f = getattr(grouped, name), getattr(full, name)
                    self.assertEqual(tuple(g.weight.shape), (kv * d, 16))
                    f.weight.copy_(g.weight.view(kv, d, 16).repeat_interleave(group, dim=0).reshape(16, 16))
                    f.bias.copy_(g.bias.view(kv, d).repeat_interleave(group, dim=0).reshape(16))
                dd = max_diff(grouped(x), full(x))
            self.assertLessEqual(dd, EXACT64, f"num_kv_heads={kv} rope={rope}: max |diff| {dd:.3e}")

    def test_glu_is_the_gated_formula(self):
        """GLU: down_proj(act(gate_proj(x)) * up_proj(x)) for silu, gelu and gelu_tanh, named as LlamaMLP"""
        x = shape(2, 3, 6)
        acts = {"silu": lambda z: z * torch.sigmoid(z), "gelu": lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))),
                "gelu_tanh": lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))}
        for name, act in acts.items():
            glu = randomise(layers.GLU(6, 10, activation=name, bias=True).double())
            self.assertEqual(sorted(k for k, _ in glu.named_parameters()),
                             sorted(f"{p}.{t}" for p in ("gate_proj", "up_proj", "down_proj") for t in ("weight", "bias")))
            with torch.no_grad():
                g = x @ glu.gate_proj.weight.T + glu.gate_proj.bias
                u = x @ glu.up_proj.weight.T + glu.up_proj.bias
                d = max_diff(glu(x), (act(g) * u) @ glu.down_proj.weight.T + glu.down_proj.bias)
            self.assertLessEqual(d, EXACT64, f"{name}: max |diff| {d:.3e}")

    def test_sinks_take_weight_from_every_row(self):
        """Attention: a sink is one more logit per head in each masked softmax row, with no value"""
        x = shape(2, 4, 8)
        att = randomise(layers.Attention(8, 2, causal=True, sinks=True).double())
        self.assertIn("sinks", dict(att.named_parameters()))
        with torch.no_grad():
            att.q_proj.weight.mul_(0.1)  # scores of order 1, so the sinks take a visible share
            att.sinks.copy_(torch.tensor([1.5, -0.5], dtype=torch.float64))
            q = att.q_proj(x).view(2, 4, 2, 4).transpose(1, 2)
            k = att.k_proj(x).view(2, 4, 2, 4).transpose(1, 2)
            v = att.v_proj(x).view(2, 4, 2, 4).transpose(1, 2)
            e = torch.exp(q @ k.transpose(2, 3) / 2.0) * torch.ones(4, 4, dtype=torch.float64).tril()
            p = e / (e.sum(-1, keepdim=True) + torch.exp(att.sinks).view(1, 2, 1, 1))
            expected = att.o_proj((p @ v).transpose(1, 2).reshape(2, 4, 8))
            d = max_diff(att(x), expected)
            self.assertLess(p.sum(-1).max().item(), 0.99)
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")

    def test_rope_rotates_pairs_by_position(self):
        """Attention: RoPE leaves token 0 unrotated and keeps each (i, i + d/2) pair's norm"""
        cos, sin = layers.rope_cos_sin(4, 6, torch.float64)
        q = torch.randn(4, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        rotated = q * cos + layers.rotate_half(q) * sin
        self.assertLessEqual(max_diff(rotated[0], q[0]), 0.0)
        pair_norm = lambda t: t[:, :3] ** 2 + t[:, 3:] ** 2  # noqa: E731
        d = max_diff(pair_norm(rotated), pair_norm(q))
        self.assertLessEqual(d, EXACT64, f"pair norms changed by {d:.3e}")

    def test_partial_and_interleaved_rope_turn_the_pairs_written_out(self):
        """Attention: rotary_dim, rope_style and rope_base turn exactly the pairs written out here"""
        k = torch.arange(1, 9, dtype=torch.float64)  # one 8-wide head at position 1
        c1, s1, c2, s2 = math.cos(1.0), math.sin(1.0), math.cos(0.1), math.sin(0.1)
        cases = [  # (rotary_dim, style, base, expected)
            (4, "half", 100.0, [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2, 5, 6, 7, 8]),
            (4, "interleaved", 100.0, [1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2, 5, 6, 7, 8]),
            (2, "half", 10000.0, [1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3, 4, 5, 6, 7, 8]),
        ]
        for r, style, base, expected in cases:
            att = layers.Attention(8, 1, rope=True, rotary_dim=r, rope_style=style, rope_base=base)
            cos, sin = layers.rope_cos_sin(2, r, torch.float64, att.rope_base, att.rope_interleaved)
            turn = layers.rotate_every_two if att.rope_interleaved else layers.rotate_half
            rotated = torch.cat((k[:r] * cos[1] + turn(k[:r]) * sin[1], k[att.rotary_dim:]))
            d = max_diff(rotated, torch.tensor(expected, dtype=torch.float64))
            self.assertLessEqual(d, EXACT64, f"rotary_dim={r} {style} base={base}: max |diff| {d:.3e}")

    def test_groupnorm_of_one_value_per_group_normalises_to_its_shift(self):
        """GroupNorm (one-value variant): one value per group gives its shift, where torch refuses"""
        one_value = importlib.import_module("biaslab_torch.layers_one_token")
        norm = randomise(one_value.GroupNorm(4, 4).double())
        x = shape(1, 1, 4)
        with torch.no_grad():
            d = max_diff(norm(x), norm.bias.view(1, 1, 4))
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")
        with self.assertRaises(ValueError):
            nn.GroupNorm(4, 4)(x.transpose(1, 2))
        plain = layers.GroupNorm(4, 4).double()
        plain.load_state_dict(norm.state_dict())
        y = shape(2, 3, 4)  # more than one value per group: the plain GroupNorm's values
        with torch.no_grad():
            d = max_diff(norm(y), plain(y))
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")

    def test_rmsnorm_is_its_formula(self):
        """RMSNorm: x / sqrt(mean(x^2) + eps) * weight, and no weight without the affine step"""
        x = shape(2, 3, 5)
        norm = randomise(layers.RMSNorm(5, eps=0.1).double())
        with torch.no_grad():
            expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 0.1) * norm.weight
            d = max_diff(norm(x), expected)
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")
        self.assertIsNone(layers.RMSNorm(5, elementwise_affine=False).weight)

    def test_layer_norm_without_bias_has_no_shift(self):
        """layer_norm_without_bias: F.layer_norm with the gain and no shift; the state dict has no bias"""
        x = shape(2, 3, 5)
        norm = randomise(layers.layer_norm_without_bias(5, eps=1e-5).double())
        self.assertEqual(sorted(norm.state_dict()), ["weight"])
        with torch.no_grad():
            d = max_diff(norm(x), nn.functional.layer_norm(x, (5,), norm.weight, None, 1e-5))
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")

    def test_features_last_norms_take_tokens_as_positions(self):
        """GroupNorm, InstanceNorm1d: the torch.nn module applied to (N, C, L) = x transposed"""
        x = shape(2, 4, 6)
        for ours, ref in ((layers.GroupNorm(3, 6), nn.GroupNorm(3, 6)),
                          (layers.InstanceNorm1d(6, affine=True), nn.InstanceNorm1d(6, affine=True))):
            randomise(ours.double())
            ref.double().load_state_dict(ours.state_dict())
            with torch.no_grad():
                d = max_diff(ours(x), ref(x.transpose(1, 2)).transpose(1, 2))
            self.assertLessEqual(d, EXACT64, f"{type(ours).__name__}: max |diff| {d:.3e}")

    def test_batch_norm_modes_and_buffers(self):
        """batch_norm: train uses batch statistics, eval the running buffers; no counter in the state dict"""
        x = shape(3, 2, 4)
        flat = x.reshape(-1, 4)
        for mode in ("train", "eval"):
            bn = randomise(layers.batch_norm(4, eps=1e-5, affine=True, mode=mode).double())
            self.assertNotIn("num_batches_tracked", bn.state_dict())
            running = bn.running_mean.clone()
            mean, var = (flat.mean(0), flat.var(0, unbiased=False)) if mode == "train" else (bn.running_mean, bn.running_var)
            with torch.no_grad():
                d = max_diff(bn(x), (x - mean) / torch.sqrt(var + 1e-5) * bn.weight + bn.bias)
            self.assertLessEqual(d, EXACT64, f"{mode}: max |diff| {d:.3e}")
            self.assertTrue(torch.equal(bn.running_mean, running), f"{mode}: the forward updated running_mean")

    def test_one_value_variants_are_defined(self):
        """BatchNorm1d, InstanceNorm1d (one value / one token): x - mean = 0, so the output is the shift"""
        x = shape(1, 1, 4)
        bn = randomise(layers_one_token.BatchNorm1d(4, affine=True).double())
        inorm = layers_one_token.InstanceNorm1d(4, affine=False).double()
        with torch.no_grad():
            self.assertLessEqual(max_diff(bn(x), bn.bias.expand(1, 1, 4)), EXACT64)
            self.assertLessEqual(inorm(x).abs().max().item(), EXACT64)

    def test_residual_and_net(self):
        """Residual, Net: x + body(x), and the engine's dotted parameter names"""
        x = shape(1, 2, 3)
        body = [nn.Linear(3, 3).double(), nn.ReLU()]
        model = randomise(layers.Net([layers.Residual(body), nn.LayerNorm(3).double()]))
        self.assertEqual(list(model.state_dict()),
                         ["layers.0.body.0.weight", "layers.0.body.0.bias", "layers.1.weight", "layers.1.bias"])
        with torch.no_grad():
            d = max_diff(model.layers[0](x), x + torch.relu(body[0](x)))
        self.assertLessEqual(d, 0.0)

    def test_convolutions_pad_as_torch_and_causally(self):
        """Conv1d, Conv2d: "same" equals torch's padding="same" (odd and even kernels, grouped);
        "causal" equals zeros before, written out; the grid is the tokens row by row"""
        x = shape(2, 12, 6)
        for k, groups in ((3, 1), (4, 2), (1, 6)):
            ours = randomise(layers.Conv1d(6, 4 if groups < 6 else 6, k, groups=groups).double())
            ref = nn.Conv1d(6, ours.out_channels, k, padding="same", groups=groups).double()
            ref.load_state_dict(ours.state_dict())
            causal = layers.Conv1d(6, ours.out_channels, k, padding="causal", groups=groups).double()
            causal.load_state_dict(ours.state_dict())
            with torch.no_grad():
                d = max_diff(ours(x), ref(x.transpose(1, 2)).transpose(1, 2))
                padded = torch.cat((torch.zeros(2, k - 1, 6, dtype=torch.float64), x), dim=1)
                dc = max_diff(causal(x), nn.functional.conv1d(padded.transpose(1, 2), causal.weight, causal.bias,
                                                              groups=groups).transpose(1, 2))
            self.assertLessEqual(d, EXACT64, f"conv1d k={k} groups={groups} same: max |diff| {d:.3e}")
            self.assertLessEqual(dc, EXACT64, f"conv1d k={k} groups={groups} causal: max |diff| {dc:.3e}")
        image = torch.randn(2, 6, 3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        tokens = image.flatten(2).transpose(1, 2)  # (B, 12, C)
        for k in (2, 3):
            ours = randomise(layers.Conv2d(6, 6, k, groups=3, grid=(3, 4)).double())
            ref = nn.Conv2d(6, 6, k, padding="same", groups=3).double()
            ref.load_state_dict(ours.state_dict())
            with torch.no_grad():
                d = max_diff(ours(tokens), ref(image).flatten(2).transpose(1, 2))
            self.assertLessEqual(d, EXACT64, f"conv2d k={k}: max |diff| {d:.3e}")


class Folds(unittest.TestCase):
    def check_exact(self, build, fold, seed=3):
        x = shape(4, 3, 6, seed=seed)
        model = randomise(build().double(), seed)
        with torch.no_grad():
            before = model(x)
            fold(model)
            d = max_diff(model(x), before)
        self.assertLessEqual(d, EXACT64, f"max |diff| {d:.3e}")
        return model

    def test_fold_norm_affine(self):
        """fold_norm_affine: LayerNorm gain and shift move into the Linear, and into q/k/v_proj"""
        m = self.check_exact(lambda: layers.Net([nn.LayerNorm(6), nn.Linear(6, 5)]),
                             lambda m: folds.fold_norm_affine(m.layers, 0))
        self.assertIsNone(m.layers[0].weight)
        self.check_exact(lambda: layers.Net([nn.LayerNorm(6), layers.Attention(6, 2)]),
                         lambda m: folds.fold_norm_affine(m.layers, 0))
        m = self.check_exact(lambda: layers.Net([nn.LayerNorm(6), layers.GLU(6, 8)]),
                             lambda m: folds.fold_norm_affine(m.layers, 0))
        self.assertIsNotNone(m.layers[1].gate_proj.bias)  # the shift moved into gate_proj and up_proj
        self.assertIsNotNone(m.layers[1].up_proj.bias)

    def test_glu_writes_through_down_proj(self):
        """drop_bias_before_norm, layernorm_to_rmsnorm: a GLU's output bias is down_proj's"""
        m = self.check_exact(lambda: layers.Net([layers.GLU(6, 8, bias=True), layers.InstanceNorm1d(6)]),
                             lambda m: folds.drop_bias_before_norm(m.layers, 0))
        self.assertIsNone(m.layers[0].down_proj.bias)
        self.check_exact(lambda: layers.Net([layers.GLU(6, 8, bias=True), layers.layer_norm_without_bias(6, 1e-5)]),
                         lambda m: folds.layernorm_to_rmsnorm(m.layers, 0))

    def test_batch_norm_eval_fusions(self):
        """fuse_linear_batchnorm_eval, fuse_batchnorm_eval_linear: one Linear instead of two modules"""
        m = self.check_exact(lambda: layers.Net([nn.Linear(6, 6), layers.batch_norm(6, 1e-5, True, "eval")]),
                             lambda m: folds.fuse_linear_batchnorm_eval(m.layers, 0))
        self.assertEqual(len(m.layers), 1)
        m = self.check_exact(lambda: layers.Net([layers.batch_norm(6, 1e-5, True, "eval"), nn.Linear(6, 4)]),
                             lambda m: folds.fuse_batchnorm_eval_linear(m.layers, 0))
        self.assertEqual(len(m.layers), 1)

    def test_conv_batch_norm_eval_fusions(self):
        """fuse_conv_batchnorm_eval: exact; fuse_batchnorm_eval_conv: exact for a 1-wide kernel,
        off at the borders only for a wider one (grouped convolutions: each output reads its group)"""
        m = self.check_exact(lambda: layers.Net([layers.Conv1d(6, 4, 3, groups=2, bias=False),
                                                 layers.batch_norm(4, 1e-5, True, "eval")]),
                             lambda m: folds.fuse_conv_batchnorm_eval(m.layers, 0))
        self.assertEqual(len(m.layers), 1)
        self.check_exact(lambda: layers.Net([layers.batch_norm(6, 1e-5, True, "eval"), layers.Conv1d(6, 4, 1, groups=2)]),
                         lambda m: folds.fuse_batchnorm_eval_conv(m.layers, 0))
        x = shape(4, 3, 6, seed=3)
        model = randomise(layers.Net([layers.batch_norm(6, 1e-5, True, "eval"), layers.Conv1d(6, 6, 3, groups=3)]).double(), 3)
        with torch.no_grad():
            before = model(x)
            folds.fuse_batchnorm_eval_conv(model.layers, 0)
            diff = (model(x) - before).abs().amax(dim=(0, 2))  # per token
        self.assertLessEqual(diff[1].item(), EXACT64, f"inside: max |diff| {diff[1].item():.3e}")
        self.assertGreater(min(diff[0].item(), diff[2].item()), 1e-3, f"borders: {diff.tolist()}")

    def test_attention_bias_folds(self):
        """drop_key_bias, fold_value_bias: the key bias cancels in softmax, the value bias moves to o_proj"""
        m = self.check_exact(lambda: layers.Net([layers.Attention(6, 2)]),
                             lambda m: (folds.drop_key_bias(m.layers, 0), folds.fold_value_bias(m.layers, 0)))
        self.assertIsNone(m.layers[0].k_proj.bias)
        self.assertIsNone(m.layers[0].v_proj.bias)
        # Grouped-query: 6 heads of 1 dimension reading 3 key/value heads, and multi-query.
        for kv in (3, 1):
            self.check_exact(lambda: layers.Net([layers.Attention(6, 6, num_kv_heads=kv)]),
                             lambda m: (folds.drop_key_bias(m.layers, 0), folds.fold_value_bias(m.layers, 0)))

    def test_biases_before_centring_norms(self):
        """drop_bias_before_norm, centre_bias_before_norm: what the norm subtracts goes, through a residual too"""
        self.check_exact(lambda: layers.Net([nn.Linear(6, 6), layers.InstanceNorm1d(6)]),
                         lambda m: folds.drop_bias_before_norm(m.layers, 0))
        self.check_exact(lambda: layers.Net([layers.Residual([nn.Linear(6, 6)]), layers.GroupNorm(2, 6)]),
                         lambda m: folds.centre_bias_before_norm(m.layers, 0, groups=2))

    def test_merge_and_layernorm_to_rmsnorm(self):
        """merge_linear_linear, layernorm_to_rmsnorm: two Linears become one; a shift-less LayerNorm an RMSNorm"""
        m = self.check_exact(lambda: layers.Net([nn.Linear(6, 8), nn.Linear(8, 6)]),
                             lambda m: folds.merge_linear_linear(m.layers, 0))
        self.assertEqual(len(m.layers), 1)
        m = self.check_exact(lambda: layers.Net([nn.Linear(6, 6), layers.layer_norm_without_bias(6, 1e-5)]),
                             lambda m: folds.layernorm_to_rmsnorm(m.layers, 0))
        self.assertIsInstance(m.layers[1], layers.RMSNorm)


class NoiseFloor(unittest.TestCase):
    @staticmethod
    def side(y, other, rounding, rounding_other, finite=True):
        return {"y": torch.tensor([y], dtype=torch.float64), "other": torch.tensor([other], dtype=torch.float64),
                "rounding": rounding, "rounding_other": rounding_other, "finite": finite}

    def test_compare_floor_is_eight_roundings(self):
        """compare: the floor is 8 (r_a + r_b); a difference counts only above it"""
        shape(1, 1, 1, dtype=torch.float32)
        a = self.side(1.0, 1.0, 1e-7, 1e-16)
        below = analysis.compare(a, self.side(1.0 + 1.5e-6, 1.0, 1e-7, 1e-16))
        above = analysis.compare(a, self.side(1.0 + 1.7e-6, 1.0, 1e-7, 1e-16))
        self.assertAlmostEqual(below["noise_floor"], 1.6e-6, delta=1e-20)
        self.assertFalse(below["above_floor"], below)
        self.assertTrue(above["above_floor"], above)

    def test_compare_float64_floor_follows_the_float32_difference(self):
        """compare: in float64, a float32 difference below its own floor raises the floor to 8 x 2^-29 x it"""
        shape(1, 1, 1, dtype=torch.float64)
        a = self.side(1.0, 1.0, 1e-17, 1e-7)
        b = self.side(1.0 + 1e-15, 1.0 + 1e-6, 1e-17, 1e-7)  # d32 = 1e-6 <= 8 (1e-7 + 1e-7)
        d = analysis.compare(a, b)
        expected = 8 * 2.0 ** -29 * 1e-6  # d32 is 1e-6 up to the rounding of 1 + 1e-6
        self.assertLessEqual(abs(d["noise_floor"] - expected), 1e-9 * expected, d)
        self.assertFalse(d["above_floor"], d)

    def test_compare_non_finite_is_a_change(self):
        """compare: a non-finite output is above any floor, with no max |delta|"""
        shape(1, 1, 1, dtype=torch.float32)
        d = analysis.compare(self.side(1.0, 1.0, 0.0, 0.0), self.side(math.inf, 1.0, 0.0, 0.0, finite=False))
        self.assertIsNone(d["max_abs_delta"])
        self.assertTrue(d["above_floor"])

    def test_unit_rms(self):
        """unit_rms: RMS 1 per entry, direction kept"""
        v = torch.randn(37, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 3
        u = report.unit_rms(v)
        rms = u.pow(2).mean().sqrt().item()
        self.assertLessEqual(abs(rms - 1.0), 1e-15, f"RMS {rms!r}")
        self.assertLessEqual(max_diff(u / u.norm(), v / v.norm()), 1e-15)

    def test_snap_null_basis(self):
        """snap_null_basis: the all-ones direction put in exactly when it is within 1e-6 of span(B)"""
        n = 6
        ones = torch.ones(n, 1, dtype=torch.float64) / math.sqrt(n)
        other = torch.zeros(n, 1, dtype=torch.float64)
        other[0], other[1] = 1 / math.sqrt(2), -1 / math.sqrt(2)
        off = torch.linalg.qr(torch.cat([ones + 1e-9 * torch.arange(n, dtype=torch.float64)[:, None], other], 1)).Q
        snapped = report.snap_null_basis(off)
        self.assertTrue(torch.equal(snapped[:, :1], ones), "the first column is not exactly ones / sqrt(n)")
        span_diff = max_diff(snapped @ snapped.T, off @ off.T)
        self.assertLessEqual(span_diff, 1e-8, f"the span moved by {span_diff:.3e}")
        far = torch.linalg.qr(torch.cat([ones + 1e-3 * torch.arange(n, dtype=torch.float64)[:, None], other], 1)).Q
        self.assertIs(report.snap_null_basis(far), far)
        self.assertTrue(torch.equal(report.snap_null_basis(ones), ones))
        eye = torch.eye(n, dtype=torch.float64)
        self.assertIs(report.snap_null_basis(eye), eye)  # k = n: nothing to snap


class Structure(unittest.TestCase):
    def run_structure(self, model, name, max_samples=4096, tokens=3, randomised=False):
        shape(1, tokens, 4)
        model = model.double() if randomised else randomise(model.double())
        for p in model.parameters():
            p.requires_grad_(False)
        return analysis.structure(model, name, analysis.StructuralInputs(1), max_samples)

    def test_layernorm_stops_after_one_input_without_gain(self):
        """structure: Linear -> LayerNorm: 1 of 4 redundant, stopped by no_gain at MIN_SAMPLES inputs"""
        st = self.run_structure(layers.Net([nn.Linear(4, 4), nn.LayerNorm(4)]), "layers.0.bias")
        self.assertEqual((st["redundant_dim"], st["stop_rule"], st["rank_history"]), (1, "no_gain", [3, 3]), st)
        self.assertEqual(st["null_basis"].shape, (4, 1))

    def test_rounding_is_not_rank(self):
        """structure: a Jacobian at rounding level adds no rank (32 roundoffs of the output's norm, as the engine)"""
        # One head over 2 tokens: one input can give the query bias rank 1 at most (b . (k_1 - k_0)).
        # With scores 40x larger the softmax saturates and the Jacobian is rounding only, while
        # the per-token reference scale underflows to 0: only the output-norm bound stops rounding
        # from counting as rank.
        shape(1, 2, 4)
        model = randomise(layers.Net([layers.Attention(4, 1)]).double())
        with torch.no_grad():
            model.layers[0].q_proj.weight.mul_(40.0)
            model.layers[0].o_proj.weight.mul_(1000.0)
        for p in model.parameters():
            p.requires_grad_(False)
        st = analysis.structure(model, "layers.0.q_proj.bias", analysis.StructuralInputs(1), 1)
        self.assertLessEqual(st["rank_history"][0], 1, st)

    def test_full_rank_stops_at_once(self):
        """structure: Linear -> Linear: full rank after one input"""
        st = self.run_structure(layers.Net([nn.Linear(4, 4), nn.Linear(4, 4)]), "layers.0.bias")
        self.assertEqual((st["redundant_dim"], st["stop_rule"], st["samples"]), (0, "full_rank", 1), st)

    def test_budget_gives_bounds(self):
        """structure: when max_samples runs out first the answer is undetermined, with bounds"""
        st = self.run_structure(layers.Net([nn.Linear(4, 4), nn.LayerNorm(4)]), "layers.0.bias", max_samples=1)
        self.assertEqual((st["redundant_dim"], st["redundant_dim_min"], st["redundant_dim_max"], st["stop_rule"]),
                         (None, 0, 1, "budget"), st)

    def test_relu_needs_a_long_run(self):
        """structure: a ReLU unit no input activates: no_gain_kinked after KINK_PATIENCE inputs, only bounds"""
        model = randomise(layers.Net([nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)]).double())
        with torch.no_grad():
            model.layers[0].weight[0].zero_()
            model.layers[0].bias[0] = -10.0  # unit 0 is dead for every input
        st = self.run_structure(model, "layers.0.bias", tokens=1, randomised=True)
        self.assertEqual((st["stop_rule"], st["redundant_dim"], st["redundant_dim_min"], st["redundant_dim_max"],
                          st["inactive_units"]), ("no_gain_kinked", None, 0, 1, 1), st)
        self.assertGreaterEqual(st["samples"], analysis.KINK_PATIENCE)


class Analysis(unittest.TestCase):
    def test_analyse_biases_on_a_tiny_model(self):
        """analyse_biases: Linear -> LayerNorm -> Linear: only the bias before the norm is partly redundant (1 of 4)"""
        x = shape(2, 3, 4, seed=7)
        model = randomise(layers.Net([nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 4)]).double())
        for p in model.parameters():
            p.requires_grad_(False)
        rows = report.analyse_biases(model, analysis.Evaluator(model, x), 64)
        got = {r["param"]: (r["redundant_dim"], r["verdict"], r["consistent"]) for r in rows}
        self.assertEqual(got, {"layers.0.bias": (1, "partly_redundant", True), "layers.1.bias": (0, "effective", True),
                               "layers.2.bias": (0, "effective", True)}, rows)


if __name__ == "__main__":
    unittest.main(verbosity=2)
