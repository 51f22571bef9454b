"""Pooling and other sliding-window ops on VectorE: planes (N*C) on partitions, windows on the free axis.

A window op reads its input through a multi-dim access pattern [out..., kernel...] (strided,
dilated), so nothing is materialised: max/avg pooling is one ``tensor_reduce`` over
out_elems * taps elements per partition, as in the NKI pooling examples. Max pooling also
writes argmax indices: per tap, compare the tap's strided view with the max and ``select``
base + tap where it matches (the window base map is an iota made once on GpSimdE). Backward ops write each
tap's share back through the same strided view: one VectorE pass per tap over the output-sized
gradient, accumulating after a memset only when windows overlap or pad (otherwise every input
position is written exactly once). im2col / col2im / unfold_backward are the same pattern with
copies instead of reductions.
"""
from __future__ import annotations

from math import prod

from backend.lowering.builder import OpContext
from backend.lowering.registry import lowering
from backend.lowering.stream import plane_stream, plane_tiling, vector_stage
from backend.sim.flops import pool_window, spatial_rank

__all__ = ["scatter_taps"]


def scatter_taps(part: int, whole: int, taps: int, dtype: str, overlap: bool) -> list:
    """Write ``taps`` strided shares of ``part`` elements into a ``whole``-element plane."""
    if overlap:
        return [vector_stage("memset", whole, dtype, value=0),
                vector_stage("tensor_tensor", part, dtype, 2, count=taps, alu="add")]
    return [vector_stage("tensor_copy", part, dtype, count=taps)]


def _pool_geometry(ctx: OpContext, x, out, adaptive: bool) -> tuple[int, int, bool]:
    """(planes, taps, overlap) of a pool whose input is ``x`` and output ``out``."""
    nd = min(spatial_rank(ctx.record.name), len(x.shape))
    planes = prod(x.shape[:-nd]) if len(x.shape) > nd else 1
    taps, overlap = pool_window(ctx.attrs, x.shape[-nd:], out.shape[-nd:], adaptive)
    return planes, taps, overlap


def _index_maps(ctx: OpContext, planes: int, loads: tuple, stores: tuple, free_elems) -> tuple:
    """Window base offsets (and tap ids): affine in the free index, one GpSimdE iota each, made once."""
    _, parts, free = plane_tiling(ctx, planes, loads, stores)
    return (ctx.builder.compute("gpsimd", "iota", free_size=free_elems(free), partitions=parts, repeat=2,
                          dtype="int32"),)


@lowering("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::adaptive_max_pool2d",
          "aten::adaptive_max_pool3d", "aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d")
def _max_pool(ctx: OpContext) -> None:
    x, out = ctx.inputs[0], ctx.outputs[0]
    planes, taps, _ = _pool_geometry(ctx, x, out, "adaptive" in ctx.record.name)
    with_indices = len(ctx.outputs) > 1
    stores = tuple(range(len(ctx.outputs)))
    deps = _index_maps(ctx, planes, (0,), stores, lambda free: free(out)) if with_indices else ()

    def stages(free):
        o = free(out)
        w = o * taps
        st = [vector_stage("tensor_reduce", w, x.dtype, out_free=o, alu="max")]
        if with_indices:
            # per tap: where that tap holds the max, take base + tap as the index
            st += [vector_stage("tensor_tensor", o, x.dtype, 2, count=taps, alu="is_equal"),
                   vector_stage("select", o, "int32", 2, count=taps)]
        return st

    plane_stream(ctx, planes, stages, loads=(0,), stores=stores, extra_deps=deps)


@lowering("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward",
          "aten::adaptive_max_pool2d_backward", "aten::adaptive_max_pool3d_backward")
def _max_pool_backward(ctx: OpContext) -> None:
    """Per tap: which outputs took their max there (index == base + tap), times the gradient."""
    g, out = ctx.inputs[0], ctx.outputs[0]
    idx = len(ctx.inputs) - 1          # indices come last; input 1 (self) only gives the shape
    planes, taps, overlap = _pool_geometry(ctx, out, g, "adaptive" in ctx.record.name)
    deps = _index_maps(ctx, planes, (0, idx), (0,), lambda free: free(g))

    def stages(free):
        o = free(g)
        return [vector_stage("tensor_tensor", o, "int32", 2, alu="subtract"),             # index - window base
                vector_stage("tensor_scalar", o, g.dtype, count=taps, alu="is_equal"),
                vector_stage("tensor_tensor", o, g.dtype, 2, count=taps, alu="multiply"),
                *scatter_taps(o, free(out), taps, g.dtype, overlap)]

    plane_stream(ctx, planes, stages, loads=(0, idx), stores=(0,), extra_deps=deps)


def _divide(ctx: OpContext, free: int, dtype: str, adaptive: bool) -> object:
    """Average: one reciprocal per tensor, unless the divisor varies (adaptive, or padding excluded)."""
    varies = adaptive or (ctx.attrs.get("count_include_pad") is False and any(ctx.attrs.get("padding") or [0]))
    if varies and ctx.attrs.get("divisor_override") is None:
        return vector_stage("tensor_tensor", free, dtype, 2, alu="multiply")             # by a per-window 1/count map
    return vector_stage("tensor_scalar", free, dtype, alu="multiply")


@lowering("aten::avg_pool2d", "aten::avg_pool3d", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d",
          "aten::avg_pool1d", "aten::adaptive_avg_pool3d", "aten::avg_pool2d_backward", "aten::avg_pool3d_backward",
          "aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool3d_backward")
def _avg_pool(ctx: OpContext) -> None:
    """Forward: window sums, then the divide; backward: the divide, then each tap's share written back."""
    backward = ctx.record.name.endswith("_backward")
    small, large = (ctx.inputs[0], ctx.outputs[0]) if backward else (ctx.outputs[0], ctx.inputs[0])
    adaptive = "adaptive" in ctx.record.name
    planes, taps, overlap = _pool_geometry(ctx, large, small, adaptive)

    def stages(free):
        o = free(small)
        divide = _divide(ctx, o, small.dtype, adaptive)
        if backward:
            return [divide, *scatter_taps(o, free(large), taps, small.dtype, overlap)]
        return [vector_stage("tensor_reduce", o * taps, large.dtype, out_free=o, alu="add"), divide]

    plane_stream(ctx, planes, stages)


@lowering("aten::im2col", "aten::col2im")
def _im2col(ctx: OpContext) -> None:
    """im2col [N, C, H, W] -> [N, C*taps, L]: each tap's strided view copied out (padded taps read a
    memset); col2im: each tap's columns written (overlapping: added) back into the image."""
    to_cols = ctx.record.name.endswith("im2col")
    cols, image = (ctx.outputs[0], ctx.inputs[0]) if to_cols else (ctx.inputs[0], ctx.outputs[0])
    planes = prod(image.shape[:-2]) if len(image.shape) > 2 else 1
    taps, overlap = pool_window(ctx.attrs, image.shape[-2:], image.shape[-2:])

    def stages(free):
        per_tap = max(1, free(cols) // taps)
        if not to_cols:
            return scatter_taps(per_tap, free(image), taps, cols.dtype, overlap)
        copies = [vector_stage("tensor_copy", per_tap, image.dtype, count=taps)]
        padded = any(ctx.attrs.get("padding") or [0])
        return [vector_stage("memset", free(cols), cols.dtype, value=0), *copies] if padded else copies

    plane_stream(ctx, planes, stages)


@lowering("aten::unfold_backward")
def _unfold_backward(ctx: OpContext) -> None:
    """Windows of ``size`` every ``step`` along ``dim`` summed back; rows before ``dim`` on partitions."""
    g, out = ctx.inputs[0], ctx.outputs[0]
    dim = int(ctx.attrs.get("dim", 0) or 0) % max(1, len(out.shape))
    size, step = int(ctx.attrs.get("size", 1) or 1), int(ctx.attrs.get("step", 1) or 1)
    planes = prod(out.shape[:dim])
    plane_stream(ctx, planes, lambda free: scatter_taps(max(1, free(g) // size), free(out), size, g.dtype,
                                                        step != size))
