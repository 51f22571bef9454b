"""Resampling: upsample / interpolate (nearest, linear, cubic) and grid_sample.

Upsampling is separable and its source positions are static, so planes (N*C) sit on
partitions and each spatial axis is one pass over the free axis: nearest is a replicating
``tensor_copy``; linear and cubic blend 2 or 4 strided neighbours with per-position weights (a
small map made once), t multiplies and t-1 adds per output element of the pass. Axes run
last-first, so each pass works on the partly resized plane. Backward passes run the same
domains in reverse and accumulate into strided views (t multiplies, t adds). grid_sample's
source positions are data: coordinates and weights on VectorE, then an indirect DMA gathers
every corner of every point (one element per descriptor for NCHW, one channel vector for
channels-last), which is what makes it expensive on a NeuronCore too.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import OpContext
from backend.lowering.data import zero_fill
from backend.lowering.indexing import indirect_copy
from backend.lowering.registry import lowering
from backend.lowering.stream import plane_stream, vector_stage
from backend.sim import assumptions

__all__ = ["interpolation_taps"]

_NEAREST = ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
            "_upsample_nearest_exact2d", "_upsample_nearest_exact3d")
_LINEAR = ("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "_upsample_bilinear2d_aa")
_CUBIC = ("upsample_bicubic2d", "_upsample_bicubic2d_aa")
GRID_CORNERS = {0: 4, 1: 1, 2: 16}      # grid_sampler interpolation_mode: bilinear, nearest, bicubic


def interpolation_taps(name: str) -> int:
    """Source neighbours per output along one axis."""
    op = name.split("::")[-1].removesuffix("_backward")
    return 4 if op in _CUBIC else 2 if op in _LINEAR else 1


def _aten(names, suffix=""):
    return tuple(f"aten::{n}{suffix}" for n in names)


def _pass_sizes(small: tuple, large: tuple) -> list[int]:
    """Elements each separable pass produces (forward: last axis resized first)."""
    sizes, cur = [], list(small)
    for ax in reversed(range(len(small))):
        cur[ax] = large[ax]
        sizes.append(prod(cur))
    return sizes


def _resample(ctx: OpContext, small, large, *, backward: bool) -> None:
    """``small`` -> ``large`` planes (forward), or gradients of ``large`` back into ``small``."""
    nd = max(1, len(large.shape) - 2)
    planes = prod(small.shape[:-nd])
    taps = interpolation_taps(ctx.record.name)
    dtype = ctx.inputs[0].dtype
    if taps == 1:
        # nearest: replicate through the access pattern, or sum each replica block back
        def stages(free):
            if backward:
                return [vector_stage("tensor_reduce", free(large), dtype, out_free=free(small), alu="add")]
            return [vector_stage("tensor_copy", free(large), dtype)]
    else:
        shares = [n / prod(large.shape[-nd:]) for n in _pass_sizes(small.shape[-nd:], large.shape[-nd:])]
        per_element = 2 * taps if backward else 2 * taps - 1

        def stages(free):
            st = [vector_stage("tensor_tensor", max(1, ceil(free(large) * share)), dtype, 2, count=per_element,
                      alu="multiply") for share in shares]
            return [vector_stage("memset", free(small), dtype, value=0), *st[::-1]] if backward else st
    plane_stream(ctx, planes, stages)


@lowering(*_aten(_NEAREST + _LINEAR + _CUBIC))
def _upsample(ctx: OpContext) -> None:
    _resample(ctx, ctx.inputs[0], ctx.outputs[0], backward=False)


@lowering(*_aten(_NEAREST + _LINEAR + _CUBIC, "_backward"))
def _upsample_backward(ctx: OpContext) -> None:
    _resample(ctx, ctx.outputs[0], ctx.inputs[0], backward=True)


def _grid_points(ctx: OpContext, x, grid, points: int) -> tuple[int, int, tuple]:
    """Load the grid and compute corner indices and weights: (corner values per point, bytes each, deps)."""
    b, t = ctx.builder, ctx.target
    parts = min(t.partitions, max(1, points))
    load = ctx.ready_deps(2 if "backward" in ctx.record.name else 1) or (
        b.dma(grid.nbytes, src="hbm", dst="sbuf", partitions=parts, row_bytes=max(1, grid.nbytes // parts)),)
    coords = b.compute("vector", "tensor_scalar", free_size=ceil(2 * points / parts), partitions=parts,
                       dtype=grid.dtype, deps=load, repeat=assumptions.value("resample.coord_passes"), flops=ceil(2 * points / parts))
    channels = x.shape[1] if len(x.shape) > 1 else 1
    corners = GRID_CORNERS.get(int(ctx.attrs.get("interpolation_mode", 0) or 0), 4)
    channels_last = x.strides is not None and len(x.strides) > 1 and x.strides[1] == 1 and channels > 1
    if channels_last:
        return corners * points, channels * x.itemsize, (coords,)
    return corners * points * channels, x.itemsize, (coords,)


@lowering("aten::grid_sampler_2d", "aten::grid_sampler_3d")
def _grid_sample(ctx: OpContext) -> None:
    x, grid, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    points = max(1, grid.numel // max(1, grid.shape[-1]))
    count, slice_bytes, deps = _grid_points(ctx, x, grid, points)
    gather = indirect_copy(ctx, index=None, count=count, slice_bytes=slice_bytes, table=0, after=deps)
    corners = GRID_CORNERS.get(int(ctx.attrs.get("interpolation_mode", 0) or 0), 4)
    parts = min(ctx.target.partitions, out.numel)
    blend = ctx.builder.compute("vector", "tensor_tensor", free_size=ceil(out.numel / parts), partitions=parts,
                          dtype=x.dtype, n_inputs=2, deps=(gather,), repeat=max(1, 2 * corners - 1),
                          flops=ceil(out.numel / parts), alu="multiply")
    if ctx.out_to_hbm[0]:
        ctx.builder.dma(out.nbytes, src="sbuf", dst="hbm", partitions=parts, row_bytes=max(1, out.nbytes // parts),
                  deps=(blend,))
    ctx.set_ready(0, (blend,))


@lowering("aten::grid_sampler_2d_backward", "aten::grid_sampler_3d_backward")
def _grid_sample_backward(ctx: OpContext) -> None:
    """grad_input: weighted corner gradients scatter-added; grad_grid: corner values gathered again."""
    g, x, grid = ctx.inputs[:3]
    points = max(1, grid.numel // max(1, grid.shape[-1]))
    count, slice_bytes, deps = _grid_points(ctx, x, grid, points)
    parts = min(ctx.target.partitions, g.numel)
    load = ctx.ready_deps(0) or (ctx.builder.dma(g.nbytes, src="hbm", dst="sbuf", partitions=parts,
                                           row_bytes=max(1, g.nbytes // parts)),)
    weigh = ctx.builder.compute("vector", "tensor_tensor", free_size=ceil(count * slice_bytes // x.itemsize / parts),
                          partitions=parts, dtype=g.dtype, n_inputs=2, deps=(*deps, *load), alu="multiply",
                          flops=ceil(count / parts))
    mask = ctx.attrs.get("output_mask", (True, True))
    if mask[0] and ctx.outputs[0].numel:
        zero = zero_fill(ctx, ctx.outputs[0])
        indirect_copy(ctx, index=None, count=count, slice_bytes=slice_bytes, scatter=True, after=(weigh, zero))
    if len(mask) > 1 and mask[1] and len(ctx.outputs) > 1 and ctx.outputs[1].numel:
        gather = indirect_copy(ctx, index=None, count=count, slice_bytes=slice_bytes, table=1, after=deps)
        gg = ctx.outputs[1]
        red = ctx.builder.compute("vector", "tensor_tensor", free_size=ceil(count * slice_bytes // x.itemsize / parts),
                            partitions=parts, dtype=g.dtype, n_inputs=2, deps=(gather, weigh), repeat=2,
                            alu="multiply", flops=ceil(count / parts))
        ctx.builder.dma(gg.nbytes, src="sbuf", dst="hbm", partitions=min(parts, gg.numel),
                  row_bytes=max(1, gg.nbytes // min(parts, gg.numel)), deps=(red,))
