"""Elementwise ops: arithmetic on VectorE, transcendental activations on ScalarE.

Mapping follows the NKI ISA: two-tensor arithmetic is ``tensor_tensor`` (VectorE), tensor-with-
scalar is ``tensor_scalar``, functions (exp, gelu, tanh, sigmoid, silu, relu, sqrt, ...) are
``activation`` on ScalarE, ``reciprocal`` is its own 8N-cycle VectorE instruction, random
numbers come from GpSimdE. Every op streams its tensors HBM -> SBUF -> HBM in tiles.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.lowering.builder import OpContext
from backend.lowering.data import (in_memory_order_of, loads_transposed, memory_order, run_bytes,
                                   transpose_stages, transposed_load_run_bytes)
from backend.lowering.registry import lowering
from backend.lowering.stream import Stage, TileIO, elementwise_tiling, scalar_stage, stream, vector_stage
from backend.sim.descriptors import TensorDesc

__all__ = ["elementwise", "BINARY_OP_TO_ALU", "ACTIVATIONS"]

# aten op -> VectorE ALU op, when both operands are tensors (else tensor_scalar).
BINARY_OP_TO_ALU = {
    "add": "add", "add_": "add", "sub": "subtract", "sub_": "subtract", "rsub": "subtract",
    "mul": "multiply", "mul_": "multiply", "div": "divide", "div_": "divide", "true_divide": "divide",
    "floor_divide": "divide", "maximum": "max", "minimum": "min", "fmax": "max", "fmin": "min",
    "pow": "pow", "pow_": "pow", "remainder": "mod", "fmod": "mod", "atan2": "atan2", "xlogy": "xlogy",
    "eq": "is_equal", "ne": "not_equal", "lt": "is_lt", "le": "is_le", "gt": "is_gt", "ge": "is_ge",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "copysign": "copysign", "threshold_backward": "select", "hardtanh_backward": "select",
    "square": "multiply", "eq_": "is_equal", "ne_": "not_equal", "lt_": "is_lt", "le_": "is_le", "gt_": "is_gt",
    "ge_": "is_ge", "logical_and_": "logical_and", "logical_or_": "logical_or", "logical_xor_": "logical_xor",
    "bitwise_and_": "bitwise_and", "bitwise_or_": "bitwise_or", "bitwise_xor_": "bitwise_xor",
    "maximum_": "max", "minimum_": "min", "remainder_": "mod", "fmod_": "mod", "atan2_": "atan2",
}
# single-tensor aten ops that are one VectorE ALU op (tensor_scalar)
UNARY_ALU_OPS = ("neg", "neg_", "abs", "abs_", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac",
          "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "hardtanh", "hardtanh_",
          "logical_not", "bitwise_not", "nan_to_num", "isnan", "isinf", "isfinite", "signbit",
          "threshold", "relu6", "floor_", "ceil_", "round_", "trunc_", "frac_", "sign_", "nan_to_num_",
          "logical_not_", "bitwise_not_", "threshold_")
# ScalarE activation functions (f(x * scale + bias) in one instruction)
ACTIVATIONS = ("exp", "exp_", "exp2", "expm1", "log", "log_", "log2", "log10", "log1p", "tanh", "tanh_",
               "sigmoid", "sigmoid_", "gelu", "gelu_", "silu", "silu_", "mish", "relu", "relu_", "sqrt",
               "sqrt_", "rsqrt", "rsqrt_", "sin", "cos", "tan", "erf", "erfc", "erfinv", "softplus", "elu",
               "elu_", "selu", "selu_", "celu", "celu_", "leaky_relu", "leaky_relu_", "hardswish", "hardswish_",
               "hardsigmoid", "hardsigmoid_", "mish_", "atan",
               "asin", "acos", "sinh", "cosh", "logit", "lgamma", "digamma")
# derivative on ScalarE, then a multiply by the incoming gradient on VectorE
ACTIVATION_BACKWARD = ("gelu_backward", "silu_backward", "mish_backward", "elu_backward",
                       "softplus_backward", "hardswish_backward", "hardsigmoid_backward",
                       "leaky_relu_backward", "sigmoid_backward", "tanh_backward", "logit_backward")
RANDOM = ("bernoulli", "bernoulli_", "uniform_", "normal_", "rand", "randn", "rand_like", "randn_like",
          "random_", "randint", "randint_like", "exponential_", "geometric_", "cauchy_", "log_normal_")

StageFn = Callable[[int, str, int, OpContext], list]


def _aten(*names: str) -> tuple:
    return tuple("aten::" + n for n in names)


def elementwise(ctx: OpContext, stages_for: StageFn, *, read_inputs: bool = True,
                extent: TensorDesc | None = None) -> list[int]:
    """Stream the op's output extent (or ``extent``); full-size inputs per tile, small ones loaded
    once. Outputs smaller than the extent (a reduced loss) are left to the caller."""
    ref = extent or (ctx.outputs[0] if ctx.outputs else ctx.inputs[0])
    numel = ref.numel
    if numel == 0:
        return []
    dtype = ctx.inputs[0].dtype if ctx.inputs else ref.dtype
    tiles, parts, free = elementwise_tiling(numel, ref.dtype, ctx.target)
    tile_elems = parts * free
    order = memory_order(ref)           # a permuted output is walked in its memory order
    loads, full_inputs, transposes = [], 0, []
    for i, t in enumerate(ctx.inputs if read_inputs else ()):
        if t.numel == 0:
            continue
        t = in_memory_order_of(order, ref, t)
        if t.numel >= numel:
            scale = t.numel // numel        # > 1 when the op shrinks its input (glu's two halves)
            if loads_transposed(t):         # a permuted view: memory order, then TensorE transposes
                row = transposed_load_run_bytes(t, parts)
                transposes += transpose_stages(scale * free, t.dtype, t.dtype)
            else:
                row = run_bytes(t, scale * free * t.itemsize)
            loads.append(TileIO(i, scale * tile_elems * t.itemsize, row, parts))
            full_inputs += 1
        elif t.numel <= tile_elems:
            # broadcast operand: replicated across partitions once, its source read once
            row = min(free, t.numel) * t.itemsize
            loads.append(TileIO(i, parts * row, row, parts, once=True, hbm_bytes=t.nbytes))
        else:
            share = -(-t.nbytes // tiles)
            loads.append(TileIO(i, share, max(t.itemsize, share // parts), parts))
    # an in-place op that reports no outputs writes its first input back
    outs = ctx.outputs or (ctx.inputs[:1] if ctx.record.name.endswith("_") else ())
    stores = [TileIO(k, tile_elems * o.itemsize, run_bytes(in_memory_order_of(order, ref, o), free * o.itemsize), parts)
              for k, o in enumerate(outs) if o.numel >= numel]
    return stream(ctx, tiles=tiles, partitions=parts, stages=transposes + stages_for(free, dtype, full_inputs, ctx),
                  loads=loads, stores=stores)


def _op(ctx: OpContext) -> str:
    return ctx.record.name.split("::", 1)[-1].split(".", 1)[0]


@lowering(*_aten(*BINARY_OP_TO_ALU))
def _binary(ctx: OpContext) -> None:
    alu = BINARY_OP_TO_ALU[_op(ctx)]

    def stages(free, dtype, full, _ctx):
        tensors = sum(1 for t in ctx.inputs if t.numel)
        if tensors >= 2:
            return [vector_stage("tensor_tensor", free, dtype, 2, alu=alu)]
        return [vector_stage("tensor_scalar", free, dtype, alu=alu)]

    elementwise(ctx, stages)


@lowering(*_aten(*UNARY_ALU_OPS))
def _unary_alu(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("tensor_scalar", free, dtype, alu=_op(ctx))])


@lowering(*_aten(*ACTIVATIONS))
def _activation(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free, dtype, _op(ctx).rstrip("_"))])


@lowering(*_aten(*ACTIVATION_BACKWARD))
def _activation_backward(ctx: OpContext) -> None:
    func = _op(ctx).replace("_backward", "_derivative")
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free, dtype, func),
                                                     vector_stage("tensor_tensor", free, dtype, 2, alu="multiply")])


@lowering(*_aten("reciprocal", "reciprocal_"))
def _reciprocal(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("reciprocal", free, dtype)])


@lowering(*_aten("where", "masked_fill", "masked_fill_", "masked_scatter"))
def _select(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("select", free, dtype, max(1, full))])


@lowering(*_aten("addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_"))
def _fused_multiply_add(ctx: OpContext) -> None:
    first = "divide" if "div" in _op(ctx) else "multiply"
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("tensor_tensor", free, dtype, 2, alu=first),
                                                     vector_stage("tensor_tensor", free, dtype, 2, alu="add")])


@lowering(*_aten("native_dropout"))
def _dropout(ctx: OpContext) -> None:
    # VectorE dropout draws and applies the mask; a second pass writes the mask for backward.
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("dropout", free, dtype),
                                                     vector_stage("tensor_scalar", free, dtype, alu="is_equal")])


@lowering(*_aten("native_dropout_backward"))
def _dropout_backward(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("tensor_tensor", free, dtype, 2, alu="multiply")])


@lowering(*_aten("fill_", "zero_", "fill", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
                 "new_zeros", "new_ones", "new_full", "scalar_tensor"))
def _fill(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("memset", free, _c.outputs[0].dtype, value=0)],
                read_inputs=False)


@lowering(*_aten(*RANDOM))
def _random(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [Stage("gpsimd", "rng", free, dtype=_c.outputs[0].dtype)],
                read_inputs=_op(ctx).startswith("bernoulli"))


@lowering(*_aten("glu"))
def _glu(ctx: OpContext) -> None:
    """a * sigmoid(b) over the halves of ``dim``: sigmoid on ScalarE, the product on VectorE."""
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free, dtype, "sigmoid"),
                                                     vector_stage("tensor_tensor", free, dtype, 2, alu="multiply")])


@lowering(*_aten("glu_backward"))
def _glu_backward(ctx: OpContext) -> None:
    # per half-element: s = sigmoid(b); da = g*s; db = g*a*s*(1-s): one activation, four VectorE ops
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free // 2 or 1, dtype, "sigmoid"),
                                                     *[vector_stage("tensor_tensor", free // 2 or 1, dtype, 2,
                                                            alu="multiply")] * 4])


@lowering(*_aten("_prelu_kernel"))
def _prelu(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [vector_stage("tensor_tensor", free, dtype, 2, alu="multiply"),
                                                     vector_stage("select", free, dtype, 2)])


@lowering(*_aten("_prelu_kernel_backward"))
def _prelu_backward(ctx: OpContext) -> None:
    # grad_input = select(x > 0, g, w*g); grad_weight (per element, summed by a later op) = select(x > 0, 0, x*g)
    elementwise(ctx, lambda free, dtype, full, _c: [
        vector_stage("tensor_tensor", free, dtype, 2, count=2, alu="multiply"),
        vector_stage("select", free, dtype, 2, count=2)])


@lowering(*_aten("log_sigmoid_forward"))
def _log_sigmoid(ctx: OpContext) -> None:
    # -softplus(-x) on ScalarE; the second output is the buffer torch keeps for backward
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free, dtype, "softplus"),
                                                     vector_stage("tensor_scalar", free, dtype, alu="multiply")])


@lowering(*_aten("log_sigmoid_backward"))
def _log_sigmoid_backward(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [scalar_stage(free, dtype, "sigmoid"),
                                                     vector_stage("tensor_tensor", free, dtype, 2, alu="multiply")])
