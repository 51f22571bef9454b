"""Reductions, softmax and normalisations.

Rows map to partitions and the reduced (last) dim to the free axis, so a row reduction is
one VectorE ``tensor_reduce`` per tile; statistics use ``bn_stats``/``bn_aggr`` (<= 512
elements per bn_stats, per the ISA), and exp/normalise passes run on ScalarE's activation
unit, which also reduces along the free axis for free. A reduction over leading dims (a
bias gradient, a column sum) is a ones-vector matmul on TensorE accumulating in PSUM, the
usual way to reduce across partitions.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import ceil, prod

from backend.lowering.builder import OpContext
from backend.lowering.data import (loads_transposed, memory_order, permute_axes, run_bytes, transpose_stages,
                                   transposed_load_run_bytes, zero_fill)
from backend.lowering.matmul import gemm
from backend.lowering.registry import lowering
from backend.lowering.stream import STREAM_BUFS, TileIO, elementwise_tiling, scalar_stage, stream, vector_stage
from backend.sim import assumptions
from backend.sim.costs import instruction_ns
from backend.sim.descriptors import TensorDesc
from backend.sim.ir import Instruction

__all__ = ["row_pipeline", "reduced_dims"]

BN_STATS_FMAX = 512             # bn_stats reads at most 512 elements per partition (ISA)


def reduced_dims(t: TensorDesc, attrs: dict) -> tuple[int, ...]:
    dims = attrs.get("dim", attrs.get("axis"))
    rank = len(t.shape)
    if dims is None or dims == [] or dims == ():
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted({d % rank for d in dims})) if rank else ()


def row_pipeline(ctx: OpContext, rows: int, width: int, stages: list | Callable[[int], list], *,
                 row_inputs: tuple = (0,), row_outputs: tuple = (0,), small_outputs: tuple = (),
                 once_inputs: tuple = (), two_pass: bool = False) -> None:
    """Rows on partitions, ``width`` elements each.

    Rows too long for a few SBUF buffers are cut into chunks and every stage runs per chunk; an
    op that must see the whole row before writing it (``two_pass``: softmax, norms) then
    streams the row twice, statistics first, then the pass that applies them. ``stages`` is the
    list for a whole row, or a function of the width it covers (for stages of several
    instructions per row, such as ``bn_stats``' 512-element pieces, which a chunk needs fewer of).
    """
    stages_for = stages if callable(stages) else None
    stages = stages_for(width) if stages_for else stages
    t = ctx.target
    parts = min(t.partitions, max(1, rows))
    widest = max((ctx.inputs[i].itemsize for i in row_inputs if ctx.inputs[i].numel), default=4)
    fits = width * widest * assumptions.value("reductions.row_buffers") <= t.sbuf_partition_bytes
    chunk = width if fits else min(width, assumptions.value("reductions.chunk_elems"))
    chunks = ceil(width / chunk)
    passes = 2 if two_pass and chunks > 1 else 1
    if chunks > 1:
        stages = stages_for(chunk) if stages_for else [replace(st, free_size=chunk) if st.free_size == width else st
                                                       for st in stages]
    tiles = ceil(rows / parts) * chunks
    loads = []
    for i in row_inputs:
        t_in = ctx.inputs[i]
        if not t_in.numel:
            continue
        row_bytes = chunk * t_in.itemsize
        if loads_transposed(t_in):      # rows along a permuted view's strided axis: transpose on TensorE
            stages = transpose_stages(chunk, t_in.dtype, t_in.dtype) + list(stages)
            row_bytes = transposed_load_run_bytes(t_in, parts)
        loads.append(TileIO(i, parts * chunk * t_in.itemsize * passes, row_bytes, parts))
    loads += [TileIO(i, parts * min(width, ctx.inputs[i].numel) * ctx.inputs[i].itemsize,
                     min(width, ctx.inputs[i].numel) * ctx.inputs[i].itemsize, parts, once=True,
                     hbm_bytes=ctx.inputs[i].nbytes) for i in once_inputs if ctx.inputs[i].numel]
    stores = [TileIO(k, parts * chunk * ctx.outputs[k].itemsize, chunk * ctx.outputs[k].itemsize, parts)
              for k in row_outputs if k < len(ctx.outputs) and ctx.outputs[k].numel]
    stores += [TileIO(k, ctx.outputs[k].nbytes // tiles or ctx.outputs[k].itemsize, ctx.outputs[k].itemsize, parts)
               for k in small_outputs if k < len(ctx.outputs) and ctx.outputs[k].numel]
    stream(ctx, tiles=tiles, partitions=parts, stages=stages, loads=loads, stores=stores)


def _rows_width(t: TensorDesc, dim: int = -1) -> tuple[int, int]:
    width = t.shape[dim] if t.shape else 1
    return max(1, t.numel // max(1, width)), max(1, width)


@lowering("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::prod",
          "aten::argmax", "aten::argmin", "aten::any", "aten::all", "aten::var", "aten::std",
          "aten::var_mean", "aten::std_mean", "aten::norm", "aten::linalg_vector_norm", "aten::logsumexp",
          "aten::count_nonzero", "aten::nansum")
def _reduce(ctx: OpContext) -> None:
    x = ctx.inputs[0]
    if x.numel == 0:
        # Nothing to read: the outputs are the reduction's identity (0 for a sum, nan for a
        # mean), one memset broadcast to HBM each.
        for k, out in enumerate(ctx.outputs):
            if out.numel:
                ctx.set_ready(k, [zero_fill(ctx, out)])
        return
    dims = reduced_dims(x, ctx.attrs)
    rank = len(x.shape)
    name = ctx.record.name.split("::")[-1]
    alu = "max" if name in ("amax", "max", "argmax", "logsumexp") else "min" if name in ("amin", "min", "argmin") else "add"
    if rank and rank - 1 not in dims:
        inner = prod(x.shape[max(dims) + 1:]) if dims else 1
        reduced = prod(x.shape[d] for d in dims)
        x_mem, dims_mem, order = _in_memory_order(x, dims)
        inner_mem = prod(x_mem.shape[max(dims_mem) + 1:])
        if _accumulates_slices(ctx, x_mem, dims_mem, reduced, inner_mem, name):
            outs = [_reordered(o, order, dims, keep=len(o.shape) == rank) for o in ctx.outputs]
            _accumulate_slices(ctx, x_mem, reduced, inner_mem, alu, name == "mean", outs)
            return
        # leading-dim reduction: sum columns with a ones-vector matmul on TensorE
        gemm(ctx, batch=1, m=1, k=reduced, n=max(1, x.numel // reduced), a=0, b=0, a_transposed=False,
             b_transposed=inner == 1)
        return
    trailing = 1
    for d in reversed(range(rank)):
        if d not in dims:
            break
        trailing *= x.shape[d]
    rows, width = max(1, x.numel // max(1, trailing)), max(1, trailing)
    if rows == 1 and width > ctx.target.partitions:
        # a full reduction: spread over partitions, reduce per partition, then across on TensorE
        rows, width = ctx.target.partitions, ceil(width / ctx.target.partitions)
    second_pass = name in ("var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm")
    extra = [vector_stage("tensor_tensor", width, x.dtype, 2, alu="subtract")] if second_pass else []
    if name == "logsumexp":
        extra = [scalar_stage(width, x.dtype, "exp", opcode="activation_reduce")]
    stages = [vector_stage("tensor_reduce", width, x.dtype, alu=alu), *extra]
    row_pipeline(ctx, rows, width, stages, row_outputs=(), small_outputs=tuple(range(len(ctx.outputs))))


_SLICE_ACCUMULATING = frozenset({"sum", "mean", "nansum", "amax", "amin"})


def _accumulates_slices(ctx: OpContext, x: TensorDesc, dims: tuple, reduced: int, inner: int, name: str) -> bool:
    """Whether reducing adjacent non-last axes of a contiguous tensor ([outer, reduced, inner]) is
    cheaper as VectorE adds of its ``reduced`` slices, tiled over the [outer, inner] output, than
    as a ones-vector matmul on TensorE, which uses one output row and ``reduced`` of the 128
    contraction rows (a sum of 4 slices of 32K elements: 64 matmuls). Both costs come from the
    instruction formulas."""
    t = ctx.target
    if name not in _SLICE_ACCUMULATING or inner < t.partitions or not x.is_contiguous \
            or tuple(dims) != tuple(range(dims[0], dims[-1] + 1)):
        return False
    tiles, _, free = elementwise_tiling(x.numel // reduced, x.dtype, t)
    if reduced * free * x.itemsize * STREAM_BUFS > t.sbuf_partition_bytes:
        return False
    add = Instruction("vector", "tensor_tensor", free_size=free, dtype=x.dtype, attrs={"alu": "add"})
    vector_ns = tiles * (reduced - 1) * instruction_ns(add, t)
    n = min(t.moving_free_max, inner)       # one nc_matmul's largest moving free size (ISA)
    ones = Instruction("tensor", "nc_matmul", partitions=min(t.partitions, reduced), free_size=n, stationary_free=1,
                       dtype=x.dtype)
    tensor_ns = ceil(reduced / t.partitions) * ceil(x.numel // reduced / n) * instruction_ns(ones, t)
    return vector_ns < tensor_ns


def _in_memory_order(x: TensorDesc, dims: tuple) -> tuple[TensorDesc, tuple, tuple | None]:
    """A dense permuted view with its axes in memory order, where ``dims`` went, and the order
    (None when ``x`` is already in it, or is not a permutation of a dense tensor)."""
    order = memory_order(x)
    if order is None:
        return x, dims, None
    return permute_axes(x, order), tuple(sorted(order.index(d) for d in dims)), order


def _reordered(out: TensorDesc, order: tuple | None, dims: tuple, keep: bool) -> TensorDesc:
    """The output as the input's memory-order walk writes it: its axes in ``order`` (the reduced
    ones of size 1, put back when the reduction dropped them)."""
    if order is None:
        return out
    if not keep:
        strides, shape = list(out.strides or out.contiguous_strides()), list(out.shape)
        for d in dims:
            shape.insert(d, 1)
            strides.insert(d, 0)
        out = TensorDesc(tuple(shape), out.dtype, tuple(strides))
    return permute_axes(out, order)


def _accumulate_slices(ctx: OpContext, x: TensorDesc, reduced: int, inner: int, alu: str, mean: bool,
                       outs: list[TensorDesc]) -> None:
    """Tiles of the [outer, inner] output on partitions; per tile, the ``reduced`` input slices
    loaded (runs of the tile's rows, cut at ``inner``) and folded into one on VectorE; a mean
    scales the result. An output laid out in another order than the walk is transposed on
    TensorE before it is stored."""
    tiles, parts, free = elementwise_tiling(x.numel // reduced, x.dtype, ctx.target)
    stages = [vector_stage("tensor_tensor", free, x.dtype, 2, count=max(1, reduced - 1), alu=alu)]
    if mean:
        stages.append(vector_stage("tensor_scalar", free, x.dtype, alu="multiply"))
    stores = []
    for k, out in enumerate(outs):
        if not out.numel:
            continue
        if loads_transposed(out):
            stages += transpose_stages(free, out.dtype, out.dtype)
            row = transposed_load_run_bytes(out, parts)
        else:
            row = run_bytes(out, free * out.itemsize)
        stores.append(TileIO(k, parts * free * out.itemsize, row, parts))
    stream(ctx, tiles=tiles, partitions=parts, stages=stages,
           loads=[TileIO(0, reduced * parts * free * x.itemsize, min(free, inner) * x.itemsize, parts)],
           stores=stores)


@lowering("aten::trace")
def _trace(ctx: OpContext) -> None:
    """The diagonal gathered by one DMA (one element per descriptor), summed on VectorE."""
    x = ctx.inputs[0]
    n = min(x.shape) if x.shape else 1
    load = ctx.ready_deps(0) or (ctx.builder.dma(n * x.itemsize, src="hbm", dst="sbuf", partitions=1,
                                           row_bytes=x.itemsize),)
    red = ctx.builder.compute("vector", "tensor_reduce", free_size=n, partitions=1, dtype=x.dtype, deps=load,
                        out_free=1, flops=n, alu="add")
    if ctx.out_to_hbm[0]:
        ctx.builder.dma(ctx.outputs[0].nbytes, src="sbuf", dst="hbm", partitions=1, deps=(red,))
    ctx.set_ready(0, (red,))


@lowering("aten::_softmax", "aten::_log_softmax", "aten::softmax", "aten::log_softmax", "aten::_safe_softmax")
def _softmax(ctx: OpContext) -> None:
    x = ctx.inputs[0]
    rows, width = _rows_width(x, ctx.attrs.get("dim", -1))
    dtype = x.dtype
    stages = [vector_stage("tensor_reduce", width, dtype, alu="max"),            # row max
              scalar_stage(width, dtype, "exp", opcode="activation_reduce"),           # exp(x - max) and its row sum
              vector_stage("reciprocal", 1, "float32"),                         # 1 / sum
              vector_stage("tensor_scalar", width, dtype, alu="multiply")]      # normalise
    row_pipeline(ctx, rows, width, stages, two_pass=True)


@lowering("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def _softmax_backward(ctx: OpContext) -> None:
    g = ctx.inputs[0]
    rows, width = _rows_width(g, ctx.attrs.get("dim", -1))
    stages = [vector_stage("tensor_tensor", width, g.dtype, 2, alu="multiply"),  # g * y
              vector_stage("tensor_reduce", width, g.dtype, alu="add"),          # sum(g * y)
              vector_stage("tensor_tensor", width, g.dtype, 2, alu="subtract"),  # g - sum
              vector_stage("tensor_tensor", width, g.dtype, 2, alu="multiply")]  # * y
    row_pipeline(ctx, rows, width, stages, row_inputs=(0, 1), two_pass=True)


def _norm_stats(width: int, dtype: str) -> list:
    chunks = ceil(width / BN_STATS_FMAX)
    return [vector_stage("bn_stats", min(width, BN_STATS_FMAX), dtype, count=chunks),
            vector_stage("bn_aggr", 6 * chunks, "float32"),
            vector_stage("tensor_scalar", 1, "float32", alu="rsqrt")]           # rstd = (var + eps)^-1/2


@lowering("aten::native_layer_norm", "aten::layer_norm")
def _layer_norm(ctx: OpContext) -> None:
    x = ctx.inputs[0]
    width = prod(ctx.attrs.get("normalized_shape", x.shape[-1:])) or 1
    rows = max(1, x.numel // width)
    affine = sum(1 for t in ctx.inputs[1:] if t.numel)
    def stages(w: int) -> list:
        return [*_norm_stats(w, x.dtype),
                scalar_stage(w, x.dtype, "identity"),                           # (x - mean) * rstd on ScalarE
                *[vector_stage("tensor_tensor", w, x.dtype, 2, alu=a) for a in ("multiply", "add")[:affine]]]
    row_pipeline(ctx, rows, width, stages, once_inputs=tuple(range(1, len(ctx.inputs))),
                 small_outputs=(1, 2), two_pass=True)


@lowering("aten::_fused_rms_norm", "aten::rms_norm")
def _rms_norm(ctx: OpContext) -> None:
    x = ctx.inputs[0]
    width = x.shape[-1] if x.shape else 1
    rows = max(1, x.numel // width)
    stages = [scalar_stage(width, x.dtype, "square", opcode="activation_reduce"),     # sum of squares
              vector_stage("tensor_scalar", 1, "float32", alu="rsqrt"),
              vector_stage("tensor_tensor", width, x.dtype, 2, alu="multiply")]  # x * rstd * weight
    row_pipeline(ctx, rows, width, stages, once_inputs=tuple(range(1, len(ctx.inputs))), small_outputs=(1,),
                 two_pass=True)


def _norm_rows(ctx: OpContext, x: TensorDesc) -> tuple[int, int]:
    """(rows, width) of a batch norm (a channel a row) or group norm (a sample's group a row).

    Fewer rows than partitions (32 channels) are each split over several partitions, so every
    lane works; the partial statistics are then combined across partitions, a [128 x 2] ones
    matmul per row group, which is left out as negligible next to the row passes."""
    if "group" in ctx.record.name:
        rows = (x.shape[0] if x.shape else 1) * int(ctx.attrs.get("group", 1) or 1)
    else:
        rows = x.shape[1] if len(x.shape) > 1 else 1
    rows = max(1, rows)
    width = max(1, x.numel // rows)
    split = max(1, min(ctx.target.partitions // rows, width // BN_STATS_FMAX))
    return rows * split, ceil(width / split)


@lowering("aten::native_batch_norm", "aten::_native_batch_norm_legit", "aten::native_group_norm",
          "aten::_native_batch_norm_legit_no_training", "aten::_native_batch_norm_legit_functional")
def _batch_group_norm(ctx: OpContext) -> None:
    """Channels (batch norm) or groups (group norm) on partitions, their elements on the free axis."""
    x = ctx.inputs[0]
    rows, width = _norm_rows(ctx, x)
    row_pipeline(ctx, rows, width, lambda w: [*_norm_stats(w, x.dtype), scalar_stage(w, x.dtype, "identity")],
                 small_outputs=tuple(range(1, len(ctx.outputs))), two_pass=True)


@lowering("aten::native_layer_norm_backward", "aten::_fused_rms_norm_backward",
          "aten::native_batch_norm_backward", "aten::native_group_norm_backward")
def _norm_backward(ctx: OpContext) -> None:
    """dx per row on Vector/Scalar. Layer/RMS norm: rows are tokens and dweight/dbias column sums
    on TensorE. Batch/group norm: rows are channels (groups), as in the forward, so the row sums
    the backward already takes are dweight/dbias."""
    g = ctx.inputs[0]
    dtype = g.dtype

    def stages(width: int) -> list:
        return [scalar_stage(width, dtype, "identity"),                            # xhat = (x - mean) * rstd
                vector_stage("tensor_tensor", width, dtype, 2, alu="multiply"),    # g * w
                vector_stage("tensor_tensor", width, dtype, 2, alu="multiply"),    # g * w * xhat
                vector_stage("tensor_reduce", width, dtype, count=2, alu="add"),   # the two row means
                vector_stage("tensor_tensor", width, dtype, 2, count=2, alu="subtract"),
                scalar_stage(width, dtype, "identity")]                            # * rstd
    once = tuple(i for i in range(2, len(ctx.inputs)))
    if "batch_norm" in ctx.record.name or "group_norm" in ctx.record.name:
        rows, width = _norm_rows(ctx, g)
        row_pipeline(ctx, rows, width, stages, row_inputs=(0, 1), row_outputs=(0,), once_inputs=once,
                     small_outputs=tuple(k for k in (1, 2) if k < len(ctx.outputs)), two_pass=True)
        return
    width = g.shape[-1] if g.shape else 1
    if "layer_norm" in ctx.record.name:
        width = prod(ctx.attrs.get("normalized_shape", g.shape[-1:])) or 1
    rows = max(1, g.numel // width)
    row_pipeline(ctx, rows, width, stages, row_inputs=(0, 1), row_outputs=(0,), once_inputs=once, two_pass=True)
    mask = ctx.attrs.get("output_mask", (True, True, True))
    for k in (1, 2):
        if k < len(ctx.outputs) and ctx.outputs[k].numel and (len(mask) <= k or mask[k]):
            gemm(ctx, batch=1, m=1, k=rows, n=width, a=0, b=0, a_transposed=False, b_transposed=False, out=k)
