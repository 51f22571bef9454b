"""Multi-tensor (``_foreach_*``) and fused optimizer ops: batched elementwise over tensor lists.

Which lists a record holds, reads and writes comes from ``backend.sim.list_ops`` (the GPU and
TPU cost models use the same structure). Work is counted per element of ONE list, while every
list is streamed: ``_foreach_addcmul_(self, t1, t2)`` reads 3 lists, computes 2 ops per element
of self, writes self. The lists are streamed as one concatenated tile stream, with one DMA
descriptor per partition row plus one per tensor boundary (small tensors cost descriptors, not
bandwidth).
"""
from __future__ import annotations

from math import ceil

from backend.lowering.builder import OpContext
from backend.lowering.registry import lowering
from backend.lowering.stream import TileIO, elementwise_tiling, scalar_stage, stream, vector_stage
from backend.sim.descriptors import TensorDesc
from backend.sim.list_ops import (FUSED_OPTIMIZER_LISTS, foreach_lists, foreach_op, foreach_read_lists,
                                  fused_optimizer_lists)

__all__ = ["foreach_lists", "FOREACH_ALU", "FOREACH_ACTIVATIONS"]

# ALU ops: (VectorE alu, ops per element)
FOREACH_ALU = {
    "add": ("add", 1), "sub": ("subtract", 1), "mul": ("multiply", 1), "div": ("divide", 1),
    "maximum": ("max", 1), "minimum": ("min", 1), "clamp_min": ("max", 1), "clamp_max": ("min", 1),
    "pow": ("pow", 1), "copy": ("bypass", 1), "addcmul": ("multiply", 2), "addcdiv": ("divide", 2),
    "lerp": ("multiply", 2), "neg": ("multiply", 1), "abs": ("abs", 1), "sign": ("sign", 1),
    "zero": ("bypass", 1), "floor": ("floor", 1), "ceil": ("ceil", 1), "round": ("round", 1),
    "trunc": ("trunc", 1), "frac": ("frac", 1), "reciprocal": ("reciprocal", 1),
}
# ScalarE activation functions
FOREACH_ACTIVATIONS = ("sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sigmoid", "tanh",
                       "sin", "cos", "tan", "erf", "erfc", "lgamma", "sinh", "cosh", "asin", "acos", "atan")
# fused optimizers, per element: VectorE tensor_tensor and tensor_scalar ops, ScalarE sqrt.
# Adam: m and v updates (3 tensor ops), step = m / (sqrt(v) + eps) (sqrt, 2 tensor ops), bias
# corrections, eps, lr (4 scalar ops); AdamW adds the decay multiply. A state list the variant
# adds or drops (amsgrad's max(max_v, v), SGD's momentum) is one tensor op more or fewer.
_FUSED_WORK = {"_fused_adam_": (5, 4, 1), "_fused_adamw_": (5, 5, 1), "_fused_sgd_": (3, 0, 0),
               "_fused_adagrad_": (4, 1, 1)}


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
    op = foreach_op(ctx.record.name)
    n, lists = foreach_lists(ctx.record.name, ctx.inputs, ctx.outputs, ctx.attrs)
    read = foreach_read_lists(op, lists)

    def stages(free, dtype, read):
        if op in FOREACH_ACTIVATIONS:
            return [scalar_stage(free, dtype, op)]
        alu, per_element = FOREACH_ALU[op]
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


@lowering(*(f"aten::{name}" for name in FUSED_OPTIMIZER_LISTS))
def _fused_optimizer(ctx: OpContext) -> None:
    tensor_ops, scalar_ops, roots = _FUSED_WORK[ctx.record.name.split("::")[-1]]
    fused = fused_optimizer_lists(ctx.record.name, ctx.attrs)
    tensor_ops += fused.extra_lists
    n = max(1, len(ctx.inputs) // fused.lists)       # grad_scale / found_inf are the remainder

    def stages(free, dtype, read):
        st = [vector_stage("tensor_tensor", free, dtype, 2, count=tensor_ops, alu="multiply")]
        st += [vector_stage("tensor_scalar", free, dtype, count=scalar_ops, alu="multiply")] if scalar_ops else []
        return st + ([scalar_stage(free, dtype, "sqrt", count=roots)] if roots else [])

    _stream_lists(ctx, n, fused.read, fused.written, stages)
