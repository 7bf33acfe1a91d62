"""Fold helpers: each rewrites a float64 model in place at (seq, i), as the engine's fold rule of the
same name does (cpp/folds/folds.cpp). The exporter emits, after the "Exact folds" banner, only the
helpers of the rules that apply to the config, and lists them in FOLDS.
"""
from .head import torch, nn
from .layers import RMSNorm

# @export fold_common

def set_bias(linear, value):
    """Gives `linear` the bias `value` (creating the parameter when it had none)."""
    linear.bias = nn.Parameter(value.detach().clone())


def bias_or_zero(linear):
    return linear.bias if linear.bias is not None else torch.zeros(linear.weight.shape[0], dtype=linear.weight.dtype)
# @export feeder


def feeders(seq, i):
    """The modules whose biases are added last before seq[i + 1]: a Linear, the projection a block
    writes its output with (WRITES: attention's o_proj, a GLU's down_proj), a norm's shift, or
    (through a residual add or a parallel block's sum, which pass them on) the last layer of a body
    or of each branch. Only modules that have a bias."""
    layer = seq[i]
    if hasattr(layer, "body"):  # a Residual
        return feeders(layer.body, len(layer.body) - 1)
    if hasattr(layer, "branches"):  # a Parallel
        return [m for branch in layer.branches for m in feeders(branch, len(branch) - 1)]
    module = getattr(layer, layer.WRITES) if hasattr(layer, "WRITES") else layer
    return [module] if getattr(module, "bias", None) is not None else []
# @export fold_norm_affine


def fold_norm_affine(seq, i):
    """Norm(x; g, b) -> Linear(W, c)  ==  Norm(x) -> Linear(W diag(g), W b + c); for an attention
    after the norm into each of q/k/v_proj, for a GLU into gate_proj and up_proj: the projections
    a block names in READS (TransformerLens fold_ln)."""
    norm, after = seq[i], seq[i + 1]
    projections = [getattr(after, name) for name in after.READS] if hasattr(after, "READS") else [after]
    gain, shift = norm.weight, getattr(norm, "bias", None)
    for proj in projections:
        W = proj.weight.clone()
        proj.weight.copy_(W * gain)
        if shift is not None:
            set_bias(proj, W @ shift + bias_or_zero(proj))
    norm.weight = None
    if shift is not None:
        norm.bias = None
# @export batchnorm_eval


def batch_norm_eval_scale_shift(bn):
    """BatchNorm (eval) as z -> s z + t."""
    gain = bn.weight if bn.weight is not None else torch.ones_like(bn.running_mean)
    shift = bn.bias if bn.bias is not None else torch.zeros_like(bn.running_mean)
    s = gain / torch.sqrt(bn.running_var + bn.eps)
    return s, shift - s * bn.running_mean
# @export fuse_linear_batchnorm_eval


def fuse_linear_batchnorm_eval(seq, i):
    """Linear(W, b) -> BatchNorm(eval)  ==  Linear(diag(s) W, s b + t) (torch's fuse_linear_bn_eval)."""
    linear, bn = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    b = bias_or_zero(linear)
    linear.weight.copy_(s[:, None] * linear.weight)
    set_bias(linear, s * b + t)
    del seq[i + 1]
# @export fuse_batchnorm_eval_linear


def fuse_batchnorm_eval_linear(seq, i):
    """BatchNorm(eval) -> Linear(W, b)  ==  Linear(W diag(s), W t + b)."""
    bn, linear = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    W = linear.weight.clone()
    set_bias(linear, W @ t + bias_or_zero(linear))
    linear.weight.copy_(W * s)
    del seq[i]
# @export fuse_conv_batchnorm_eval


def fuse_conv_batchnorm_eval(seq, i):
    """Conv(W, b) -> BatchNorm(eval)  ==  Conv(diag(s) W, s b + t), output channel by channel
    (torch.nn.utils.fusion.fuse_conv_bn_eval)."""
    conv, bn = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    b = bias_or_zero(conv)
    conv.weight.copy_(s.view(-1, *[1] * (conv.weight.dim() - 1)) * conv.weight)
    set_bias(conv, s * b + t)
    del seq[i + 1]
# @export fuse_batchnorm_eval_conv


def fuse_batchnorm_eval_conv(seq, i):
    """BatchNorm(eval) -> Conv(W, b)  ==  Conv(W diag(s), b + sum over taps of W t) inside the grid;
    at the borders the zero padding drops taps, so with a kernel wider than 1 it is not exact."""
    bn, conv = seq[i], seq[i + 1]
    s, t = batch_norm_eval_scale_shift(bn)
    W = conv.weight.clone()  # (out, in / groups, k...)
    per_out = W.shape[0] // conv.groups
    s_o = s.view(conv.groups, -1).repeat_interleave(per_out, dim=0)  # (out, in / groups): s of the channel read
    t_o = t.view(conv.groups, -1).repeat_interleave(per_out, dim=0)
    set_bias(conv, bias_or_zero(conv) + (W.flatten(2).sum(-1) * t_o).sum(1))
    conv.weight.copy_(W * s_o.view(*s_o.shape, *[1] * (W.dim() - 2)))
    del seq[i]
# @export drop_key_bias


def drop_key_bias(seq, i):
    """softmax_j(q_i . (k_j + b_K)) = softmax_j(q_i . k_j): q_i . b_K is the same for every key j."""
    seq[i].k_proj.bias = None
# @export drop_unrotated_key_bias


def drop_unrotated_key_bias(seq, i):
    """Partial RoPE rotates only the first rotary_dim dimensions of each head; on the others q_i . b_K
    is the same for every key j, so those entries of the key bias are zeroed."""
    attention = seq[i]
    bias = attention.k_proj.bias.view(attention.num_kv_heads, attention.head_dim)
    bias[:, attention.rotary_dim:] = 0
# @export fold_value_bias


def fold_value_bias(seq, i):
    """Softmax rows sum to 1, so the value bias adds W_O b_V to every token: b_O' = b_O + W_O b_V,
    with b_V repeated to the query heads of its group under grouped-query attention."""
    attention = seq[i]
    o = attention.o_proj
    group = attention.num_heads // attention.num_kv_heads
    bv = attention.v_proj.bias.view(attention.num_kv_heads, -1).repeat_interleave(group, dim=0).reshape(-1)
    set_bias(o, o.weight @ bv + bias_or_zero(o))
    attention.v_proj.bias = None
# @export drop_bias_before_norm


def drop_bias_before_norm(seq, i):
    """BatchNorm (train) and InstanceNorm subtract every feature's mean: the biases before them cancel,
    and a position table before them loses each feature's mean over the positions."""
    if getattr(seq[i], "TABLE", False):
        seq[i].weight.sub_(seq[i].weight.mean(dim=0, keepdim=True))
        return
    for module in feeders(seq, i):
        if isinstance(module, (nn.Linear, nn.LayerNorm)):
            module.bias = None
        else:  # a BatchNorm/GroupNorm/InstanceNorm shift is tied to its gain by affine=True
            module.bias.zero_()
# @export centre_bias_before_norm


def centre_bias_before_norm(seq, i, groups):
    """LayerNorm and softmax cancel a bias's mean, GroupNorm each group's mean: remove them. A
    position table loses each row's mean before LayerNorm and softmax (per token), and each
    group's mean over all its rows before GroupNorm (per sample)."""
    if getattr(seq[i], "TABLE", False):
        table = seq[i].weight.view(seq[i].weight.shape[0], groups, -1)
        over = (0, 2) if isinstance(seq[i + 1], nn.GroupNorm) else (2,)
        table.sub_(table.mean(dim=over, keepdim=True))
        return
    for module in feeders(seq, i):
        grouped = module.bias.view(groups, -1)
        module.bias.copy_((grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1))
# @export merge_branch_biases


def merge_branch_biases(seq, i):
    """x + sum_b (g_b(x) + c_b): only the sum of the biases closing a parallel block's branches
    matters. One keeps it: the first that can only be zeroed (a GLU's bias covers its three
    projections, a norm's shift is tied to its gain), else the first; the others go."""
    def closing(branch):  # [(module holding the bias, whether the bias can be removed)]
        layer = branch[len(branch) - 1]
        if hasattr(layer, "body"):
            return closing(layer.body)
        if hasattr(layer, "branches"):
            return [c for b in layer.branches for c in closing(b)]
        module = getattr(layer, layer.WRITES) if hasattr(layer, "WRITES") else layer
        if getattr(module, "bias", None) is None:
            return []
        return [(module, isinstance(module, (nn.Linear, nn.LayerNorm)) and not getattr(layer, "SHARED_BIAS", False))]
    biases = [c for branch in seq[i].branches for c in closing(branch)]
    keep = next((k for k, (_, removable) in enumerate(biases) if not removable), 0)
    kept = biases[keep][0]
    for k, (module, removable) in enumerate(biases):
        if k == keep:
            continue
        kept.bias.add_(module.bias)
        if removable:
            module.bias = None
        else:
            module.bias.zero_()
# @export merge_linear_linear


def merge_linear_linear(seq, i):
    """W2 (W1 x + b1) + b2 = (W2 W1) x + (W2 b1 + b2)."""
    a, b = seq[i], seq[i + 1]
    has_bias = a.bias is not None or b.bias is not None
    merged = nn.Linear(a.in_features, b.out_features, bias=has_bias, dtype=a.weight.dtype)
    merged.weight.copy_(b.weight @ a.weight)
    if has_bias:
        merged.bias.copy_(b.weight @ bias_or_zero(a) + bias_or_zero(b))
    seq[i] = merged
    del seq[i + 1]
# @export centre_writer


def centre_writer(layer):
    """Centres the output of the projection `layer` writes with (a Linear, attention's o_proj, a
    GLU's down_proj): W <- W - 1 mean(W), b <- b - mean(b); or each row of a position table.
    Returns the projection (or the table's module)."""
    if getattr(layer, "TABLE", False):
        layer.weight.sub_(layer.weight.mean(dim=1, keepdim=True))
        return layer
    writer = getattr(layer, layer.WRITES) if hasattr(layer, "WRITES") else layer
    writer.weight.sub_(writer.weight.mean(dim=0, keepdim=True))
    if writer.bias is not None:
        writer.bias.sub_(writer.bias.mean())
    return writer
# @export layernorm_to_rmsnorm


def layernorm_to_rmsnorm(seq, i):
    """LN(W x + b) = RMS(C W x + C b) with C = I - 11^T/n, for a LayerNorm without shift: once the
    writer's output rows are centred the LayerNorm subtracts nothing (TransformerLens
    center_writing_weights; Jiang et al. 2023)."""
    writer = centre_writer(seq[i])
    ln = seq[i + 1]
    rms = RMSNorm(ln.normalized_shape[0], eps=ln.eps, elementwise_affine=ln.weight is not None)
    rms = rms.to(writer.weight.dtype)
    if ln.weight is not None:
        rms.weight.copy_(ln.weight)
    seq[i + 1] = rms
# @export centre_writers


def centre_writers(seq, i):
    """A run of residual and parallel blocks (each body and branch beginning with a LayerNorm) and
    the LayerNorm after it read the stream only through LayerNorms, which ignore each token's mean:
    the layer seq[i] when it writes into the run, and the last layer of each body and branch, where
    they write through a projection, are centred (TransformerLens center_writing_weights)."""
    writes = lambda layer: isinstance(layer, nn.Linear) or hasattr(layer, "WRITES") or hasattr(layer, "TABLE") or \
        (isinstance(layer, (nn.Conv1d, nn.Conv2d)) and layer.groups == 1)  # grouped rows read other inputs
    block = lambda layer: hasattr(layer, "body") or hasattr(layer, "branches")  # Residual, Parallel
    start = i if block(seq[i]) else i + 1
    end = start
    while end < len(seq) and block(seq[end]):
        end += 1
    layers = [seq[k] for k in range(i, start)]
    for b in range(start, end):
        sequences = [seq[b].body] if hasattr(seq[b], "body") else list(seq[b].branches)
        layers += [s[-1] for s in sequences]
    for layer in layers:
        if writes(layer):
            centre_writer(layer)
