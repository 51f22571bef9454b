"""Multi-tensor (``_foreach_*``) and fused optimizer ops: batched elementwise over tensor lists.

The device records a list op's tensors flattened, list after list. The per-list length comes
from the outputs (out-of-place ops return one list), a ``scalars`` list, or the op's list arity
(a ``scalar``/``weight`` argument means one list fewer; a trailing lone tensor is the Tensor
overload's scalar). Work is then counted per element of ONE list, while every list is streamed:
``_foreach_addcmul_(self, t1, t2)`` reads 3 lists, computes 2 ops per element of self, writes
self. The lists are streamed as one concatenated tile stream, with one DMA descriptor per
partition row plus one per tensor boundary (small tensors cost descriptors, not bandwidth).
"""
from __future__ import annotations

from math import ceil

from backend.lowering.builder import OpContext
from backend.lowering.registry import lowering
from backend.lowering.stream import TileIO, elementwise_tiling, scalar_stage, stream, vector_stage
from backend.sim.descriptors import TensorDesc

__all__ = ["foreach_lists", "FOREACH_ALU", "FOREACH_ACTIVATIONS"]

# ALU ops: (VectorE alu, ops per element, tensor lists of the List overload)
FOREACH_ALU = {
    "add": ("add", 1, 2), "sub": ("subtract", 1, 2), "mul": ("multiply", 1, 2), "div": ("divide", 1, 2),
    "maximum": ("max", 1, 2), "minimum": ("min", 1, 2), "clamp_min": ("max", 1, 2), "clamp_max": ("min", 1, 2),
    "pow": ("pow", 1, 2), "copy": ("bypass", 1, 2), "addcmul": ("multiply", 2, 3), "addcdiv": ("divide", 2, 3),
    "lerp": ("multiply", 2, 3), "neg": ("multiply", 1, 1), "abs": ("abs", 1, 1), "sign": ("sign", 1, 1),
    "zero": ("bypass", 1, 1), "floor": ("floor", 1, 1), "ceil": ("ceil", 1, 1), "round": ("round", 1, 1),
    "trunc": ("trunc", 1, 1), "frac": ("frac", 1, 1), "reciprocal": ("reciprocal", 1, 1),
}
# ScalarE activation functions
FOREACH_ACTIVATIONS = ("sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sigmoid", "tanh",
                       "sin", "cos", "tan", "erf", "erfc", "lgamma", "sinh", "cosh", "asin", "acos", "atan")
_SCALAR_ARGS = ("scalar", "weight", "exponent")
# fused optimizers: (tensor lists, positions of the lists written, per element: VectorE tensor_tensor
# and tensor_scalar ops, ScalarE sqrt); adam's lists are params, grads, exp_avgs, exp_avg_sqs,
# [max_exp_avg_sqs,] state_steps. Adam: m and v updates (3 tensor ops), step = m / (sqrt(v) + eps)
# (sqrt, 2 tensor ops), bias corrections, eps, lr (4 scalar ops); AdamW adds the decay multiply.
_FUSED = {"_fused_adam_": (5, (0, 2, 3), (5, 4, 1)), "_fused_adamw_": (5, (0, 2, 3), (5, 5, 1)),
          "_fused_sgd_": (3, (0, 2), (3, 0, 0)), "_fused_adagrad_": (4, (0, 2), (4, 1, 1))}


def _same_shapes(a, b) -> bool:
    return [t.shape for t in a] == [t.shape for t in b]


def foreach_lists(name: str, inputs: tuple, outputs: tuple, attrs: dict) -> tuple[int, int]:
    """(list length n, tensor lists) of a flattened ``_foreach_*`` record."""
    op = name.split("::")[-1].removeprefix("_foreach_").rstrip("_")
    if outputs:
        return len(outputs), max(1, len(inputs) // len(outputs))
    if isinstance(attrs.get("scalars"), list) and attrs["scalars"]:
        n = len(attrs["scalars"])
        return n, max(1, len(inputs) // n)
    arity = FOREACH_ALU.get(op, ("", 1, 1))[2]
    if any(attrs.get(k) is not None for k in _SCALAR_ARGS):
        arity -= 1
    arity = max(1, arity)
    total = len(inputs)
    if total % arity == 0:
        n = total // arity
        if arity == 1 or _same_shapes(inputs[:n], inputs[n:2 * n]):
            return n, arity
    # Tensor overload: a lone scalar tensor last, in place of a binary op's second list
    lists = arity if arity >= 3 else 1
    return max(1, (total - 1) // lists), lists


def _stream_lists(ctx: OpContext, n: int, read: int, written: tuple, stages_for) -> list[int]:
    """Stream ``read`` lists of ``n`` tensors (list 0's element count per list); store the output
    list, or (in place) the lists at positions ``written``."""
    first: tuple[TensorDesc, ...] = ctx.inputs[:n]
    numel = sum(t.numel for t in first)
    if numel == 0:
        return []
    dtype = first[0].dtype
    tiles, parts, free = elementwise_tiling(numel, dtype, ctx.target)

    def io(index: int, desc: TensorDesc) -> TileIO:
        tile_bytes = parts * free * desc.itemsize
        return TileIO(index, tile_bytes, max(desc.itemsize, tile_bytes // (parts + ceil(n / tiles))), parts)

    loads = [io(j * n, ctx.inputs[j * n]) for j in range(read) if j * n < len(ctx.inputs)]
    if ctx.outputs:
        stores = [io(0, ctx.outputs[0])] if written else []
    else:
        stores = [io(j * n, ctx.inputs[j * n]) for j in written if j * n < len(ctx.inputs)]
    return stream(ctx, tiles=tiles, partitions=parts, loads=loads, stores=stores, stages=stages_for(free, dtype, read))


@lowering(*(f"aten::_foreach_{op}{s}" for op in (*FOREACH_ALU, *FOREACH_ACTIVATIONS) for s in ("", "_")))
def _foreach(ctx: OpContext) -> None:
    op = ctx.record.name.split("::")[-1].removeprefix("_foreach_").rstrip("_")
    n, lists = foreach_lists(ctx.record.name, ctx.inputs, ctx.outputs, ctx.attrs)
    read = 0 if op == "zero" else lists

    def stages(free, dtype, read):
        if op in FOREACH_ACTIVATIONS:
            return [scalar_stage(free, dtype, op)]
        alu, per_element, _ = FOREACH_ALU[op]
        if op == "zero":
            return [vector_stage("memset", free, dtype, value=0)]
        if op == "reciprocal":
            return [vector_stage("reciprocal", free, dtype)]
        opcode = "tensor_tensor" if read >= 2 else "tensor_scalar"
        return [vector_stage(opcode, free, dtype, 2 if read >= 2 else 1, count=per_element, alu=alu)]

    _stream_lists(ctx, n, read, (0,), stages)


@lowering("aten::_foreach_norm")
def _foreach_norm(ctx: OpContext) -> None:
    """Sum of squares per tile on ScalarE (activation with free-axis reduce), partials combined."""
    n = max(1, len(ctx.outputs))
    last = _stream_lists(ctx, n, 1, (), lambda free, dtype, read: [
        scalar_stage(free, dtype, "square", opcode="activation_reduce"),
        vector_stage("tensor_reduce", 1, "float32", alu="add")])
    norms = sum(o.nbytes for o in ctx.outputs)
    if last and norms and ctx.out_to_hbm[0]:
        ctx.builder.dma(norms, src="sbuf", dst="hbm", partitions=1, deps=last[-1:])


@lowering(*(f"aten::{name}" for name in _FUSED))
def _fused_optimizer(ctx: OpContext) -> None:
    lists, written, (tensor_ops, scalar_ops, roots) = _FUSED[ctx.record.name.split("::")[-1]]
    if ctx.attrs.get("amsgrad"):
        lists, written, tensor_ops = lists + 1, (*written, 4), tensor_ops + 1      # max(max_v, v)
    if "sgd" in ctx.record.name and not ctx.attrs.get("momentum"):
        lists, written, tensor_ops = lists - 1, (0,), tensor_ops - 1
    n = max(1, len(ctx.inputs) // lists)       # grad_scale / found_inf are the remainder
    read = lists - 1 if "adam" in ctx.record.name or "adagrad" in ctx.record.name else lists   # state steps: tiny

    def stages(free, dtype, read):
        st = [vector_stage("tensor_tensor", free, dtype, 2, count=tensor_ops, alu="multiply")]
        st += [vector_stage("tensor_scalar", free, dtype, count=scalar_ops, alu="multiply")] if scalar_ops else []
        return st + ([scalar_stage(free, dtype, "sqrt", count=roots)] if roots else [])

    _stream_lists(ctx, n, read, written, stages)
