"""Data movement: copies and casts, concatenation, padding, allocations, host transfers, fallbacks.

Contiguous copies are HBM->HBM DMAs (the DMA engines cast on the fly). A copy whose source
runs are shorter than ``data.min_dma_run_bytes`` (an assumption; a transpose or permute made contiguous) goes
through SBUF and is transposed on TensorE in 128x128 blocks, as a compiler would, rather than
paying one DMA descriptor per element. Host<->device transfers use the host link; an op
nothing lowers runs on the host: its inputs go down, the host computes, its outputs come back.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import Builder, OpContext
from backend.sim.flops import op_flops, op_min_bytes
from backend.lowering.registry import lowering
from backend.lowering.stream import Stage, TileIO, elementwise_tiling, stream
from backend.sim import assumptions
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.ir import Program
from backend.sim.presets import NeuronConfig

__all__ = ["contiguous_run", "memory_run", "memory_order", "permute_axes", "in_memory_order_of", "broadcast_base",
           "loads_transposed", "transposed_load_run_bytes", "transpose_stages", "run_bytes", "transfer_program", "fallback_program", "fallback_into", "copy_tensor",
           "base_program", "zero_fill"]

TRANSPOSE_BLOCK = 128           # the PE array's 128x128 (pe_rows x pe_cols)


def contiguous_run(t: TensorDesc) -> int:
    """Elements in the innermost run that is contiguous in memory."""
    if t.strides is None or t.is_contiguous:
        return max(1, t.numel)
    run, expected = 1, 1
    for size, stride in zip(reversed(t.shape), reversed(t.strides)):
        if size == 1:
            continue
        if stride != expected:
            break
        run *= size
        expected *= size
    return run


def memory_run(t: TensorDesc) -> int:
    """Elements contiguous in memory from the view's stride-1 axis on, in whatever logical order:
    a transposed or permuted view of a contiguous tensor is as contiguous as the tensor."""
    if t.strides is None or t.is_contiguous:
        return max(1, t.numel)
    run = 1
    for stride, size in sorted((stride, size) for size, stride in zip(t.shape, t.strides) if size > 1):
        if stride != run:
            break
        run *= size
    return run


def memory_order(t: TensorDesc) -> tuple[int, ...] | None:
    """The axes of a dense permuted view, outermost in memory first; None when ``t`` is
    contiguous already or is not a permutation of a dense tensor."""
    if t.strides is None or t.is_contiguous or memory_run(t) != t.numel:
        return None
    return tuple(sorted(range(len(t.shape)), key=lambda d: (-t.strides[d], d)))


def permute_axes(t: TensorDesc, order: tuple[int, ...]) -> TensorDesc:
    """``t`` described with its axes in ``order`` (the same bytes, walked in another order)."""
    strides = t.strides or t.contiguous_strides()
    return TensorDesc(tuple(t.shape[d] for d in order), t.dtype, tuple(strides[d] for d in order))


def in_memory_order_of(order: tuple[int, ...] | None, ref: TensorDesc, t: TensorDesc) -> TensorDesc:
    """``t`` walked in ``order``, the memory order of ``ref`` (a dense permuted view of the same
    shape): an elementwise kernel walks its output in memory order, so operands permuted like the
    output stream contiguously. ``t`` itself when there is no order or the shapes differ."""
    return t if order is None or t.shape != ref.shape else permute_axes(t, order)


def loads_transposed(t: TensorDesc) -> bool:
    """Whether tiles of ``t`` are loaded in memory order and transposed on TensorE, as a compiler
    does for a permuted view, rather than DMA'd with one descriptor per short logical run: its runs
    are under ``data.min_dma_run_bytes`` and memory order is longer."""
    run = contiguous_run(t)
    return (run * t.itemsize < assumptions.value("data.min_dma_run_bytes") and t.numel >= TRANSPOSE_BLOCK
            and memory_run(t) > run)


def transposed_load_run_bytes(t: TensorDesc, partitions: int) -> int:
    """Descriptor bytes of a tile load in memory order, to be transposed on TensorE: each
    descriptor is one source row of a [partitions x 128] block, as long as memory keeps it whole."""
    return t.itemsize * max(1, min(partitions, memory_run(t)))


def transpose_stages(free: int, dtype: str, out_dtype: str) -> list[Stage]:
    """TensorE transposes of a [partitions, free] tile in 128x128 blocks into PSUM, then VectorE
    copies out of PSUM (four blocks an instruction)."""
    blocks = max(1, free // TRANSPOSE_BLOCK)
    return [Stage("tensor", "nc_transpose", TRANSPOSE_BLOCK, count=blocks, dtype=dtype, dst="psum",
                  flops=2 * TRANSPOSE_BLOCK ** 3),
            Stage("vector", "tensor_copy", min(free, 4 * TRANSPOSE_BLOCK), count=max(1, blocks // 4),
                  dtype="float32", out_dtype=out_dtype, src="psum")]


def run_bytes(t: TensorDesc, tile_row_bytes: int) -> int:
    """Bytes per DMA descriptor when moving a tile row of ``tile_row_bytes`` to or from ``t`` in
    HBM: a descriptor covers one contiguous run, so a strided view (a ``select`` of the last
    axis) costs a descriptor per run, down to one per element. A broadcast (a stride-0 axis) is
    read once and replicated on chip, so it keeps the tile's rows."""
    if t.strides is not None and any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.strides)):
        return tile_row_bytes
    return max(t.itemsize, min(tile_row_bytes, contiguous_run(t) * t.itemsize))


def broadcast_base(t: TensorDesc) -> TensorDesc | None:
    """What an expanded view reads: ``t`` without its stride-0 axes; None when it has none."""
    if t.strides is None or not any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.strides)):
        return None
    kept = [(size, stride) for size, stride in zip(t.shape, t.strides) if stride or size == 1]
    return TensorDesc(tuple(size for size, _ in kept), t.dtype, tuple(stride for _, stride in kept))


def _broadcast_copy(ctx: OpContext, src_index: int, base: TensorDesc, dst: TensorDesc) -> None:
    """Materialise an expanded view (``expand(...).contiguous()``, the ones ``sum().backward()``
    starts from): its base read into SBUF once, each output tile built from it on VectorE
    (casting if needed) and stored, instead of one descriptor per element."""
    tiles, parts, free = elementwise_tiling(dst.numel, dst.dtype, ctx.target)
    row = max(base.itemsize, min(free, base.numel) * base.itemsize)
    stream(ctx, tiles=tiles, partitions=parts,
           stages=[Stage("vector", "tensor_copy", free, dtype=base.dtype, out_dtype=dst.dtype)],
           loads=[TileIO(src_index, max(parts * row, base.nbytes), run_bytes(base, row), parts, once=True,
                         hbm_bytes=base.nbytes)],
           stores=[TileIO(0, parts * free * dst.itemsize, run_bytes(dst, free * dst.itemsize), parts)])


def copy_tensor(ctx: OpContext, src_index: int, src: TensorDesc, dst: TensorDesc) -> None:
    """Copy (and cast) ``src`` into ``dst`` (contiguous, or a strided view ``copy_`` writes into)."""
    if dst.numel == 0:
        return
    base = broadcast_base(src)
    if base is not None and base.nbytes <= ctx.target.sbuf_usable_bytes // 2:
        _broadcast_copy(ctx, src_index, base, dst)
        return
    src_run = contiguous_run(src) * src.itemsize
    if src_run >= assumptions.value("data.min_dma_run_bytes") or src.numel < TRANSPOSE_BLOCK:
        # one descriptor per run of whichever side is more fragmented (``copy_`` into a strided view)
        row = min(run_bytes(src, src_run), run_bytes(dst, src_run))
        ids = [ctx.builder.dma(max(src.nbytes, dst.nbytes), src="hbm", dst="hbm",
                               row_bytes=row, src_bytes=src.nbytes, dst_bytes=dst.nbytes,
                               deps=ctx.ready_deps(src_index))]
        ctx.set_ready(0, ids)
        return
    tiles, parts, free = elementwise_tiling(dst.numel, dst.dtype, ctx.target)
    # a permuted view loads in memory order (its rows whole); a gather of short runs cannot
    load_run = transposed_load_run_bytes(src, parts) if loads_transposed(src) else max(src.itemsize, src_run)
    stream(ctx, tiles=tiles, partitions=parts, stages=transpose_stages(free, src.dtype, dst.dtype),
           loads=[TileIO(src_index, parts * free * src.itemsize, load_run, parts)],
           stores=[TileIO(0, parts * free * dst.itemsize, run_bytes(dst, free * dst.itemsize), parts)])


def zero_fill(ctx: OpContext, out: TensorDesc, nbytes: int | None = None, run_bytes: int | None = None) -> int:
    """Zero ``nbytes`` (default: all) of an HBM tensor, in runs of ``run_bytes``: one memset tile
    (a streamed tile's size, assumption ``stream.tile_bytes_per_partition``) in SBUF, broadcast
    out by DMA."""
    b, t = ctx.builder, ctx.target
    nbytes = out.nbytes if nbytes is None else nbytes
    tile_elems = assumptions.value("stream.tile_bytes_per_partition") // out.itemsize
    free = max(1, min(ceil(nbytes / out.itemsize / t.partitions), tile_elems))
    ms = b.compute("vector", "memset", free_size=free, dtype=out.dtype, value=0)
    return b.dma(nbytes, src="sbuf", dst="hbm", row_bytes=run_bytes or free * out.itemsize, deps=(ms,),
                 src_bytes=t.partitions * free * out.itemsize)


@lowering("aten::_to_copy", "aten::clone", "aten::contiguous", "aten::to", "aten::_copy_from",
          "aten::permute_copy", "aten::transpose_copy", "aten::t_copy", "aten::expand_copy",
          "aten::view_copy", "aten::_reshape_copy", "aten::alias_copy", "aten::lift_fresh_copy",
          "aten::flip", "aten::roll", "aten::repeat", "aten::tile")
def _copy(ctx: OpContext) -> None:
    copy_tensor(ctx, 0, ctx.inputs[0], ctx.outputs[0] if ctx.outputs else ctx.inputs[0])


@lowering("aten::as_strided_copy")
def _strided_copy(ctx: OpContext) -> None:
    """Gather the strided view of the input into a contiguous output (runs follow its strides)."""
    src, out = ctx.inputs[0], ctx.outputs[0]
    strides = ctx.attrs.get("stride")
    copy_tensor(ctx, 0, TensorDesc(out.shape, src.dtype, tuple(strides) if strides else None), out)


def _view_run_bytes(ctx: OpContext, src: TensorDesc) -> int:
    """Contiguous bytes of the output view ``src`` is written into: a select or slice of axis
    ``dim`` of a contiguous output keeps runs of ``src.shape[dim:]`` (one element for the last
    axis); views without a ``dim`` are taken as running along ``src``'s last axis."""
    dim = ctx.attrs.get("dim")
    if dim is None or not src.shape or ctx.record.name not in ("aten::select_scatter", "aten::slice_scatter"):
        return max(src.itemsize, src.shape[-1] * src.itemsize if src.shape else 0)
    out = ctx.outputs[0]
    dim %= len(out.shape)
    if ctx.record.name == "aten::slice_scatter" and (ctx.attrs.get("step") or 1) != 1:
        return src.itemsize
    return src.itemsize * prod(src.shape[dim:])


@lowering("aten::as_strided_scatter", "aten::slice_scatter", "aten::select_scatter", "aten::diagonal_scatter")
def _scatter_into_view(ctx: OpContext) -> None:
    """The input copied to the output, then ``src`` DMA'd over its view of the output."""
    base, src, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    copy_tensor(ctx, 0, base, out)
    if src.numel:
        after_copy = ctx.out_ready[0] if ctx.out_ready and ctx.out_ready[0] else ()
        write = ctx.builder.dma(src.nbytes, src="hbm", dst="hbm", row_bytes=_view_run_bytes(ctx, src),
                                deps=(*ctx.ready_deps(1), *after_copy[-1:]))
        ctx.set_ready(0, [write])


@lowering("aten::copy_", "aten::copy", "aten::_copy_from_and_resize")
def _copy_into(ctx: OpContext) -> None:
    # copy_(self, src) and its functional twin copy(self, src): the source is the second argument;
    # self is overwritten (or only gives the layout), not read.
    src_index = 1 if len(ctx.inputs) > 1 else 0
    copy_tensor(ctx, src_index, ctx.inputs[src_index], ctx.outputs[0] if ctx.outputs else ctx.inputs[0])


@lowering("aten::cat", "aten::stack", "aten::constant_pad_nd", "aten::pad", "aten::hstack", "aten::vstack")
def _assemble(ctx: OpContext) -> None:
    """Each input is DMA'd into its slice of the output; slices run at the input's row length."""
    for i, t in enumerate(ctx.inputs):
        if t.numel == 0:
            continue
        dim = ctx.attrs.get("dim", 0) or 0
        dim = dim % len(t.shape) if t.shape else 0
        run = t.itemsize
        for size in t.shape[dim:]:
            run *= size
        ctx.builder.dma(t.nbytes, src="hbm", dst="hbm", row_bytes=max(t.itemsize, run), deps=ctx.ready_deps(i))


@lowering("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
          "aten::new_empty_strided", "aten::resize_", "aten::set_", "aten::detach_", free=True)
def _allocate(ctx: OpContext) -> None:
    """Allocations touch no device engine: only the allocator runs."""


def _shapes(tensors) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors)


def base_program(record: OpRecord, target: NeuronConfig, kind: str) -> Program:
    return Program(record.name, kind, launch_overhead_ns=0.0 if kind == "view" else target.launch_overhead_ns,
                   flops=0 if kind == "transfer" else op_flops(record), input_shapes=_shapes(record.inputs),
                   output_shapes=_shapes(record.outputs), source=record.source)


def transfer_program(record: OpRecord, target: NeuronConfig) -> Program:
    """Host<->device copy over the host link; the host waits for device->host reads."""
    if record.transfer not in ("h2d", "d2h"):
        raise ValueError(f"{record.name}: transfer must be 'h2d' or 'd2h', got {record.transfer!r}")
    program = base_program(record, target, "transfer")
    program.sync = record.transfer == "d2h"
    tensors = record.outputs if record.transfer == "h2d" else record.inputs
    nbytes = sum(t.nbytes for t in tensors) or sum(t.nbytes for t in (*record.inputs, *record.outputs))
    src, dst = ("host", "hbm") if record.transfer == "h2d" else ("hbm", "host")
    if nbytes:
        Builder(program, target).dma(nbytes, src=src, dst=dst, row_bytes=nbytes)
    return program


def fallback_program(record: OpRecord, target: NeuronConfig) -> Program:
    """Inputs device->host, host compute (roofline on host rates), outputs host->device."""
    program = base_program(record, target, "fallback")
    fallback_into(Builder(program, target), record)
    return program


def fallback_into(b: Builder, record: OpRecord) -> int:
    """Append a host round trip for ``record``; the host waits for it. Returns the last id."""
    b.program.sync = True
    downs = tuple(b.dma(t.nbytes, src="hbm", dst="host", row_bytes=t.nbytes) for t in record.inputs if t.nbytes)
    last = b.host("host_compute", flops=op_flops(record), nbytes=op_min_bytes(record), deps=downs)
    ups = [b.dma(t.nbytes, src="host", dst="hbm", row_bytes=t.nbytes, deps=(last,)) for t in record.outputs if t.nbytes]
    return ups[-1] if ups else last
