"""Pointwise losses and their gradients: per-element terms on VectorE/ScalarE, reduced on chip.

A loss streams its inputs and computes each element's term; with reduction 'mean' or 'sum'
every tile is also summed along the free axis by a ScalarE ``activation_reduce`` (free when the
last term is an activation anyway) into per-partition partials,
which one ones-vector matmul on TensorE folds across partitions (the usual cross-partition
sum) before a single scalar is stored. Reduction 'none' stores the terms. Gradients are
elementwise over the inputs, scaled by the incoming (often broadcast scalar) gradient.
Transcendentals (log, softplus, sigmoid) are ScalarE activations; the rest are VectorE ALU ops.
nll_loss picks one log-probability per target by an indirect DMA gather and sums them; its
backward zero-fills the gradient and scatters -weight/N to the target positions.
"""
from __future__ import annotations

from math import ceil

from backend.lowering.builder import OpContext
from backend.lowering.data import zero_fill
from backend.lowering.elementwise import elementwise
from backend.lowering.indexing import indirect_copy
from backend.lowering.registry import lowering
from backend.lowering.stream import scalar_stage, vector_stage

__all__ = ["LOSS_TERMS"]


def _tt(n: int, alu: str = "multiply"):
    return lambda free, dtype: [vector_stage("tensor_tensor", free, dtype, 2, count=n, alu=alu)]


def _ts(n: int, alu: str = "max"):
    return lambda free, dtype: [vector_stage("tensor_scalar", free, dtype, count=n, alu=alu)]


def _acts(*funcs: str):
    return lambda free, dtype: [scalar_stage(free, dtype, f) for f in funcs]


# op -> per-element stage builders, in order
LOSS_TERMS = {
    "mse_loss": (_tt(1, "subtract"), _acts("square")),                          # (x - t)^2
    "huber_loss": (_tt(1, "subtract"), _ts(2), _tt(2)),                         # d; |d|, min(|d|, delta); q*(|d| - q/2)
    "smooth_l1_loss": (_tt(1, "subtract"), _ts(2), _tt(2)),
    "soft_margin_loss": (_tt(1), _acts("softplus")),                            # softplus(-y * x)
    "binary_cross_entropy": (_acts("log", "log"), _ts(2), _tt(3)),              # log x, log(1-x), clamp, blend
    "binary_cross_entropy_with_logits": (_acts("softplus"), _tt(3)),            # (1-t)x + softplus(-x)
    "mse_loss_backward": (_tt(1, "subtract"), _ts(1, "multiply"), _tt(1)),     # 2(x-t)/N * g
    "huber_loss_backward": (_tt(1, "subtract"), _ts(1), _tt(1)),                # clamp(d, -delta, delta) * g
    "smooth_l1_loss_backward": (_tt(1, "subtract"), _ts(2), _tt(1)),
    "soft_margin_loss_backward": (_tt(1), _acts("sigmoid"), _tt(2)),
    "binary_cross_entropy_backward": (_tt(1, "subtract"), _ts(2), _tt(1), _tt(1, "divide"), _tt(1)),
}


def _weighted(ctx: OpContext, base: int) -> int:
    """Extra multiplies for optional weight / pos_weight tensors beyond the ``base`` inputs."""
    return sum(1 for t in ctx.inputs[base:] if t.numel > 1)


@lowering(*(f"aten::{name}" for name in LOSS_TERMS))
def _loss(ctx: OpContext) -> None:
    op = ctx.record.name.split("::")[-1]
    backward = op.endswith("_backward")
    x = ctx.inputs[1] if backward else ctx.inputs[0]
    extra = _weighted(ctx, 3 if backward else 2)
    out = ctx.outputs[0]
    reduced = out.numel < x.numel

    def stages(free, dtype, full, _c):
        st = [s for make in LOSS_TERMS[op] for s in make(free, dtype)]
        st += [vector_stage("tensor_tensor", free, dtype, 2, count=extra, alu="multiply")] if extra else []
        if reduced:     # ScalarE's activation accumulates along the free axis at no extra cost
            last = st[-1]
            if last.engine == "scalar" and last.count == 1:
                st[-1] = scalar_stage(free, dtype, last.attrs["func"], opcode="activation_reduce")
            else:
                st.append(scalar_stage(free, dtype, "identity", opcode="activation_reduce"))
        return st

    last = elementwise(ctx, stages, extent=x)
    if reduced and last:
        parts = min(ctx.target.partitions, x.numel)
        fold = ctx.builder.matmul(k=parts, m=1, n=1, dtype="float32", deps=last)          # sum across partitions
        ev = ctx.builder.compute("vector", "tensor_copy", free_size=1, partitions=1, src="psum", deps=(fold,),
                           out_dtype=out.dtype)
        if ctx.out_to_hbm[0]:
            ctx.builder.dma(out.nbytes, src="sbuf", dst="hbm", partitions=1, deps=(ev,))
        ctx.set_ready(0, (ev,))


@lowering("aten::nll_loss_forward", "aten::nll_loss2d_forward")
def _nll_loss(ctx: OpContext) -> None:
    logp, target = ctx.inputs[0], ctx.inputs[1]
    picked = indirect_copy(ctx, index=1, count=max(1, target.numel), slice_bytes=logp.itemsize, table=0)
    parts = min(ctx.target.partitions, max(1, target.numel))
    red = ctx.builder.compute("vector", "tensor_reduce", free_size=ceil(target.numel / parts), partitions=parts,
                        dtype=logp.dtype, deps=(picked,), alu="add")
    for k, o in enumerate(ctx.outputs):
        if o.numel and ctx.out_to_hbm[k]:
            ctx.builder.dma(o.nbytes, src="sbuf", dst="hbm", partitions=1, deps=(red,))
    ctx.set_ready(0, (red,))


@lowering("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def _nll_loss_backward(ctx: OpContext) -> None:
    out, target = ctx.outputs[0], ctx.inputs[2]
    zero = zero_fill(ctx, out)
    scat = indirect_copy(ctx, index=2, count=max(1, target.numel), slice_bytes=out.itemsize, scatter=True,
                         after=(zero,))
    ctx.set_ready(0, (zero, scat))
