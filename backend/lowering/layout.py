"""Layout ops: gradients of views, padding, shuffles.

The gradient of a view (select, slice, narrow) is a zero tensor with the incoming gradient
written into the viewed region: zeros go out by DMA from one memset tile, only over the bytes
the gradient does not cover, and the gradient is DMA'd HBM->HBM into its region in runs as
long as the region is contiguous; the two transfers are independent and overlap on the DMA
queues. diagonal_backward / diag_embed place one element per row, so on chip they are a
GpSimdE ``affine_select`` (keep where row == col + offset) streamed over the output.
Reflection and replication pads build each plane on VectorE through mirrored or clamped
access patterns (the backward adds the border gradients back); pixel shuffles interleave on
chip; a channel shuffle moves whole planes, so it is a DMA of plane-long runs.
"""
from __future__ import annotations

from math import prod

from backend.lowering.builder import OpContext
from backend.lowering.data import zero_fill
from backend.lowering.elementwise import elementwise
from backend.lowering.registry import lowering
from backend.lowering.stream import Stage, plane_stream, vector_stage
from backend.sim.flops import spatial_rank

__all__ = ["view_gradient"]

_PADS = ("reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
         "replication_pad3d")


def view_gradient(ctx: OpContext, dim: int, start: int, length: int, step: int) -> None:
    """zeros(input_sizes) with the gradient written at ``start::step`` (``length`` of them) along ``dim``."""
    g, out = ctx.inputs[0], ctx.outputs[0]
    if out.numel == 0:
        return
    sizes = out.shape
    dim %= max(1, len(sizes))
    size = sizes[dim] if sizes else 1
    inner, outer = prod(sizes[dim + 1:]), prod(sizes[:dim])
    start %= max(1, size)
    ids = []
    zero_bytes = out.nbytes - g.nbytes
    if zero_bytes > 0:
        # gaps between written runs: between every element when strided, else before and/or after
        gaps = outer * (length if step > 1 else max(1, (start > 0) + (start + length < size)))
        ids.append(zero_fill(ctx, out, zero_bytes, run_bytes=max(out.itemsize, zero_bytes // gaps)))
    if g.numel:
        run = inner * (length if step == 1 else 1) * g.itemsize
        ids.append(ctx.builder.dma(g.nbytes, src="hbm", dst="hbm", row_bytes=max(g.itemsize, run),
                             deps=ctx.ready_deps(0)))
    ctx.set_ready(0, ids)


@lowering("aten::select_backward")
def _select_backward(ctx: OpContext) -> None:
    view_gradient(ctx, int(ctx.attrs.get("dim", 0) or 0), int(ctx.attrs.get("index", 0) or 0), 1, 1)


@lowering("aten::slice_backward")
def _slice_backward(ctx: OpContext) -> None:
    dim = int(ctx.attrs.get("dim", 0) or 0)
    g = ctx.inputs[0]
    length = g.shape[dim] if g.shape else 1
    view_gradient(ctx, dim, int(ctx.attrs.get("start", 0) or 0), length, int(ctx.attrs.get("step", 1) or 1))


@lowering("aten::diagonal_backward", "aten::diag_embed")
def _diagonal_scatter(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [Stage("gpsimd", "affine_select", free, dtype=dtype)])


def _planes(t, nd: int) -> int:
    return prod(t.shape[:-nd]) if len(t.shape) > nd else 1


@lowering(*(f"aten::{n}" for n in _PADS))
def _pad(ctx: OpContext) -> None:
    x, out = ctx.inputs[0], ctx.outputs[0]
    plane_stream(ctx, _planes(x, spatial_rank(ctx.record.name)),
                 lambda free: [vector_stage("tensor_copy", free(out), x.dtype)])


@lowering(*(f"aten::{n}_backward" for n in _PADS))
def _pad_backward(ctx: OpContext) -> None:
    """The interior copied out, the border gradients added onto the positions they mirror."""
    g, out = ctx.inputs[0], ctx.outputs[0]

    def stages(free):
        return [vector_stage("tensor_copy", free(out), g.dtype),
                vector_stage("tensor_tensor", max(1, free(g) - free(out)), g.dtype, 2, alu="add")]

    plane_stream(ctx, _planes(out, spatial_rank(ctx.record.name)), stages)     # input 1 (self) gives only the shape


@lowering("aten::pixel_shuffle", "aten::pixel_unshuffle")
def _pixel_shuffle(ctx: OpContext) -> None:
    """Each output plane gathers r*r input planes (contiguous channels) and interleaves them."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    r = int(ctx.attrs.get("upscale_factor", ctx.attrs.get("downscale_factor", 1)) or 1)
    planes = prod(out.shape[:-3]) * min(out.shape[-3], x.shape[-3]) if len(out.shape) >= 3 else 1
    plane_stream(ctx, planes,
                 lambda free: [vector_stage("tensor_copy", free(out), x.dtype, strided=r * x.itemsize > 16)])


@lowering("aten::channel_shuffle", "aten::native_channel_shuffle")
def _channel_shuffle(ctx: OpContext) -> None:
    x = ctx.inputs[0]
    run = prod(x.shape[2:]) * x.itemsize if len(x.shape) > 2 else x.itemsize
    ctx.set_ready(0, (ctx.builder.dma(x.nbytes, src="hbm", dst="hbm", row_bytes=run, deps=ctx.ready_deps(0)),))
