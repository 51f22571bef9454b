"""Shape-only FLOP and minimum-byte counts per aten op.

Modelled on ``torch/utils/flop_counter.py`` (a multiply-add counts 2 FLOPs, bias adds are
ignored) but driven by ``OpRecord`` descriptors so that both the NeuronCore lowering and the
GPU cost model can use it without torch. Non-matmul ops are counted at a few FLOPs per
element, the way a roofline counts them: one per arithmetic result, a few for transcendentals
and the multi-pass ops (softmax, norms). Ops nobody registered count 0 FLOPs, like torch's
counter; their time still comes from the bytes they move.
"""
from __future__ import annotations

from collections.abc import Callable
from math import prod

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.list_ops import inplace_list_tensors
from backend.sim.registry import Registry

__all__ = [
    "flop_formula", "op_flops", "is_matmul_like", "op_min_bytes", "op_read_write_bytes", "base_name",
    "registered_flop_ops", "storage_bytes", "ELEMENTWISE_FLOPS_PER_ELEMENT", "pool_window", "spatial_rank",
]

FlopFormula = Callable[[OpRecord], int]
_FORMULAS = Registry("FLOP formula")


def base_name(name: str) -> str:
    """``"aten::add.Tensor"`` -> ``"aten::add"``; names without a namespace get ``aten::``."""
    if "::" not in name:
        name = "aten::" + name
    ns, _, op = name.partition("::")
    return f"{ns}::{op.split('.', 1)[0]}"


def flop_formula(*names: str, matmul: bool = False) -> Callable[[FlopFormula], FlopFormula]:
    """Register ``fn(record) -> flops`` for op names; a name registered twice is an error."""

    return _FORMULAS.decorator(*(base_name(n) for n in names), tag="matmul" if matmul else None)


def op_flops(record: OpRecord) -> int:
    """FLOPs the op performs (0 for views, transfers and unregistered ops)."""
    if record.is_view or record.transfer:
        return 0
    fn = _FORMULAS.get(base_name(record.name))
    return int(fn(record)) if fn else 0


def is_matmul_like(name: str) -> bool:
    """True for ops whose FLOPs run on a matrix unit (TensorE / tensor cores)."""
    return _FORMULAS.has_tag(base_name(name), "matmul")


def registered_flop_ops() -> frozenset[str]:
    return _FORMULAS.keys()


def storage_bytes(desc: TensorDesc) -> int:
    """Bytes of distinct memory a tensor touches: broadcast (stride 0) dims read once."""
    if desc.strides is None:
        return desc.nbytes
    distinct = prod(s for s, st in zip(desc.shape, desc.strides) if st != 0)
    return distinct * desc.itemsize


def op_min_bytes(record: OpRecord) -> int:
    """Lower bound on memory traffic: what ``op_read_write_bytes`` reads plus what it writes.

    Views move nothing. An in-place op's output is its first input; it still costs a read and
    a write, so nothing is deduplicated.
    """
    return sum(op_read_write_bytes(record))


def op_read_write_bytes(record: OpRecord) -> tuple[int, int]:
    """(bytes read, bytes written) of an op: inputs read once, outputs written once.

    An in-place list op (``_foreach_add_``, ``_fused_adamw_``) lists no outputs: it writes the
    lists it updates (self; AdamW's params, exp_avgs and exp_avg_sqs) and reads only its tensor
    lists (``backend.sim.list_ops``). A single-tensor in-place op (``add_``) lists self as its
    output, so the general rule already counts its write.
    """
    if record.is_view:
        return 0, 0
    in_place = inplace_list_tensors(record)
    read, written = in_place if in_place is not None else (record.inputs, record.outputs)
    return sum(storage_bytes(t) for t in read), sum(storage_bytes(t) for t in written)


# -- matrix multiplies -------------------------------------------------------------------
def _contraction(t: TensorDesc) -> int:
    """K of a left operand: its last dim (a vector's only dim)."""
    return t.shape[-1] if t.shape else 1


def _out_numel(record: OpRecord) -> int:
    return record.outputs[0].numel if record.outputs else 0


@flop_formula("aten::mm", "aten::bmm", "aten::matmul", "aten::mv", "aten::dot", "aten::vdot",
              "aten::_scaled_mm", "aten::linear", matmul=True)
def _mm_flops(record: OpRecord) -> int:
    # linear(input[.., K], weight[N, K]) and mm(a[M, K], b[K, N]) both contract a's last dim.
    return 2 * _out_numel(record) * _contraction(record.inputs[0])


@flop_formula("aten::addmm", "aten::baddbmm", "aten::addmv", matmul=True)
def _addmm_flops(record: OpRecord) -> int:
    # inputs: (bias, a, b); the bias add is not counted (as in torch's counter).
    return 2 * _out_numel(record) * _contraction(record.inputs[1])


@flop_formula("aten::addbmm", matmul=True)
def _addbmm_flops(record: OpRecord) -> int:
    # addbmm sums a batch of [M, K] @ [K, N] products into one [M, N].
    a, b = record.inputs[1], record.inputs[2]
    return 2 * a.numel * b.shape[-1]


@flop_formula("aten::_cdist_forward", "aten::_cdist_backward", matmul=True)
def _cdist_flops(record: OpRecord) -> int:
    # x1 [.., P, M] against x2 [.., R, M]: one multiply-add per pair and feature (the p = 2 Gram GEMM)
    x1, x2 = record.inputs[1:3] if record.name.endswith("backward") else record.inputs[:2]
    return 2 * x1.numel * x2.shape[-2]


# -- convolution -------------------------------------------------------------------------
def conv_flop_count(x_shape, w_shape, out_shape, transposed: bool = False) -> int:
    """torch's formula: every output point (input point if transposed) meets the filter."""
    batch = x_shape[0]
    conv_shape = (x_shape if transposed else out_shape)[2:]
    c_out, c_in, *filter_size = w_shape
    return 2 * prod(conv_shape) * prod(filter_size) * batch * c_out * c_in


@flop_formula("aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
              "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_slow_conv2d_forward",
              matmul=True)
def _conv_flops(record: OpRecord) -> int:
    x, w = record.inputs[0], record.inputs[1]
    return conv_flop_count(x.shape, w.shape, record.outputs[0].shape,
                           bool(record.attrs.get("transposed", False)))


@flop_formula("aten::convolution_backward", "aten::convolution_backward_overrideable", matmul=True)
def _conv_backward_flops(record: OpRecord) -> int:
    grad_out, x, w = (t.shape for t in record.inputs[:3])
    transposed = bool(record.attrs.get("transposed", False))
    mask = record.attrs.get("output_mask", (True, True, False))

    def t(shape):
        return (shape[1], shape[0], *shape[2:])

    flops = 0
    if mask[0]:  # grad_input is a transposed conv of grad_out with the weight
        flops += conv_flop_count(grad_out, w, x, not transposed)
    if len(mask) > 1 and mask[1]:  # grad_weight is a conv of input with grad_out
        src, kernel = (grad_out, x) if transposed else (x, grad_out)
        flops += conv_flop_count(t(src), t(kernel), t(w), False)
    return flops


# -- attention ---------------------------------------------------------------------------
def sdpa_flop_count(q: tuple, k: tuple, v: tuple, backward: bool = False) -> int:
    """Q@K^T and P@V (forward); backward recomputes none and does 4 such products."""
    *batch, s_q, d_q = q
    s_k, d_v = k[-2], v[-1]
    heads = prod(batch)
    fwd = 2 * heads * s_q * s_k * d_q + 2 * heads * s_q * s_k * d_v
    return 2 * fwd if backward else fwd


@flop_formula("aten::scaled_dot_product_attention",
              "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_efficient_attention",
              "aten::_scaled_dot_product_cudnn_attention",
              "aten::_scaled_dot_product_fused_attention_overrideable", matmul=True)
def _sdpa_flops(record: OpRecord) -> int:
    q, k, v = (t.shape for t in record.inputs[:3])
    return sdpa_flop_count(q, k, v)


@flop_formula("aten::_scaled_dot_product_flash_attention_backward",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "aten::_scaled_dot_product_efficient_attention_backward",
              "aten::_scaled_dot_product_cudnn_attention_backward",
              "aten::_scaled_dot_product_fused_attention_overrideable_backward", matmul=True)
def _sdpa_backward_flops(record: OpRecord) -> int:
    # inputs: (grad_out, query, key, value, ...)
    q, k, v = (t.shape for t in record.inputs[1:4])
    return sdpa_flop_count(q, k, v, backward=True)


# -- elementwise, reductions, normalisations ---------------------------------------------
# FLOPs per element of the largest output (or input, for reductions and in-place ops).
ELEMENTWISE_FLOPS_PER_ELEMENT: dict[str, int] = {
    # one arithmetic result per element
    **dict.fromkeys(("add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg",
                     "abs", "maximum", "minimum", "clamp", "clamp_", "clamp_min", "clamp_max",
                     "relu", "relu_", "threshold_backward", "where", "masked_fill",
                     "masked_fill_", "eq", "ne", "lt", "le", "gt", "ge", "sign", "square",
                     "hardtanh", "leaky_relu", "fill_", "zero_", "floor", "ceil", "round",
                     "logical_not", "logical_and", "logical_or", "bitwise_and", "bitwise_or",
                     "reciprocal", "remainder", "fmod"), 1),
    # fused multiply-adds and interpolation
    **dict.fromkeys(("addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_",
                     "sigmoid_backward", "tanh_backward", "hardtanh_backward", "pow",
                     "pow_", "sqrt", "rsqrt", "sqrt_", "rsqrt_", "mse_loss"), 2),
    # transcendentals: a short polynomial on the vector/activation unit
    **dict.fromkeys(("exp", "exp_", "log", "log_", "log1p", "expm1", "tanh", "tanh_",
                     "sigmoid", "sigmoid_", "erf", "sin", "cos", "elu", "softplus",
                     "leaky_relu_backward", "hardswish", "hardsigmoid"), 4),
    **dict.fromkeys(("gelu", "gelu_", "silu", "silu_", "mish", "gelu_backward",
                     "silu_backward", "mish_backward", "elu_backward"), 5),
    # reductions: one combine per input element (var/std: sub, square, add)
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin",
                     "any", "all", "cumsum", "logsumexp", "nll_loss_forward",
                     "nll_loss_backward"), 1),
    **dict.fromkeys(("var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm"), 3),
    # multi-pass ops: max, subtract, exp, sum, divide
    **dict.fromkeys(("_softmax", "_log_softmax", "softmax", "log_softmax"), 5),
    **dict.fromkeys(("_softmax_backward_data", "_log_softmax_backward_data"), 4),
    # mean, variance, normalise, scale and shift
    **dict.fromkeys(("native_layer_norm", "layer_norm", "native_batch_norm",
                     "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "native_group_norm", "_fused_rms_norm", "rms_norm"), 5),
    **dict.fromkeys(("native_layer_norm_backward", "native_batch_norm_backward",
                     "native_group_norm_backward", "_fused_rms_norm_backward"), 8),
    # pointwise losses and gated activations: the terms each element needs
    **dict.fromkeys(("_prelu_kernel", "mse_loss_backward", "huber_loss_backward",
                     "smooth_l1_loss_backward"), 3),
    **dict.fromkeys(("huber_loss", "smooth_l1_loss", "_prelu_kernel_backward"), 4),
    **dict.fromkeys(("glu", "log_sigmoid_forward", "log_sigmoid_backward", "soft_margin_loss",
                     "soft_margin_loss_backward"), 5),
    **dict.fromkeys(("binary_cross_entropy", "binary_cross_entropy_with_logits",
                     "binary_cross_entropy_backward", "glu_backward"), 6),
}


def _largest_numel(record: OpRecord) -> int:
    return max((t.numel for t in (*record.inputs, *record.outputs)), default=0)


def _elementwise_formula(per_element: int) -> FlopFormula:
    return lambda record: per_element * _largest_numel(record)


def _register_elementwise() -> None:
    by_cost: dict[int, list[str]] = {}
    for op, per_element in ELEMENTWISE_FLOPS_PER_ELEMENT.items():
        by_cost.setdefault(per_element, []).append("aten::" + op)
    for per_element, names in by_cost.items():
        flop_formula(*names)(_elementwise_formula(per_element))


_register_elementwise()


# -- windows and selection ---------------------------------------------------------------
def pool_window(attrs: dict, in_spatial: tuple, out_spatial: tuple, adaptive: bool = False) -> tuple[int, bool]:
    """(elements per window, whether windows overlap or pad) of a pool over the trailing dims.

    An adaptive window i spans [floor(i*In/Out), ceil((i+1)*In/Out)): the widest is
    ceil(In/Out), one more when Out does not divide In (then neighbours share an element).
    """
    nd = len(out_spatial)

    def per_dim(value, default: int) -> list[int]:
        if value is None or value == [] or value == ():
            return [default] * nd
        value = [value] if isinstance(value, int) else list(value)
        return value * nd if len(value) == 1 else value[-nd:]

    if adaptive:
        sizes = [(max(1, i), max(1, o)) for i, o in zip(in_spatial, out_spatial)]
        return prod(-(-i // o) + (i % o != 0) for i, o in sizes), any(i % o for i, o in sizes)
    kernel = per_dim(attrs.get("kernel_size"), 1)
    stride = per_dim(attrs.get("stride") or kernel, 1)
    padding = per_dim(attrs.get("padding"), 0)
    return prod(kernel), any(s < k for s, k in zip(stride, kernel)) or any(padding)


def spatial_rank(name: str) -> int:
    """Spatial dims of a 1d/2d/3d op by its name (pools, pads, upsamples); 2 when unnamed."""
    return 3 if "3d" in name else 1 if "1d" in name else 2


@flop_formula("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::adaptive_max_pool2d",
              "aten::adaptive_max_pool3d", "aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d",
              "aten::avg_pool2d", "aten::avg_pool3d", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d",
              "aten::avg_pool1d", "aten::adaptive_avg_pool3d", "aten::max_pool2d_with_indices_backward",
              "aten::max_pool3d_with_indices_backward", "aten::adaptive_max_pool2d_backward",
              "aten::adaptive_max_pool3d_backward", "aten::avg_pool2d_backward", "aten::avg_pool3d_backward",
              "aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool3d_backward")
def _pool_flops(record: OpRecord) -> int:
    # one compare or add per window element of every pooled output
    backward = record.name.endswith("_backward")
    x = record.outputs[0] if backward else record.inputs[0]
    pooled = record.inputs[0] if backward else record.outputs[0]
    nd = min(spatial_rank(record.name), len(x.shape))
    taps, _ = pool_window(record.attrs, x.shape[-nd:], pooled.shape[-nd:], "adaptive" in record.name)
    return pooled.numel * taps


def _sorted_dim(record: OpRecord) -> tuple[int, int]:
    x = record.inputs[0]
    dim = record.attrs.get("dim")
    if not x.shape or (dim is None and "median" in record.name):
        return 1, max(1, x.numel)
    n = max(1, x.shape[int(-1 if dim is None else dim) % len(x.shape)])
    return x.numel // n, n


@flop_formula("aten::sort", "aten::argsort", "aten::msort")
def _sort_flops(record: OpRecord) -> int:
    rows, n = _sorted_dim(record)
    return rows * n * max(1, (n - 1).bit_length())          # n log2 n compares per row


@flop_formula("aten::topk", "aten::kthvalue", "aten::median", "aten::nanmedian")
def _select_flops(record: OpRecord) -> int:
    rows, n = _sorted_dim(record)
    return rows * n                                         # selection: linear in the row
