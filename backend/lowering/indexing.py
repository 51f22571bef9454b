"""Index-driven ops on GpSimdE and indirect DMAs: embeddings, gathers, scatters, iota, masks.

A gather loads its indices into SBUF, GpSimdE turns them into DMA descriptors (software DGE),
and an indirect DMA moves one contiguous slice per index. Scatter-adds use the DMA engines'
read-modify-write add at the destination. iota/arange and triangular masks (affine_select)
are GpSimdE instructions of 150 + N cycles.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import OpContext
from backend.lowering.data import zero_fill
from backend.lowering.elementwise import elementwise
from backend.lowering.registry import lowering
from backend.lowering.stream import Stage
from backend.sim.descriptors import TensorDesc

__all__ = ["indirect_copy"]


def _slice_bytes(t: TensorDesc, dim: int) -> int:
    """Contiguous bytes one index selects along ``dim`` of a contiguous tensor."""
    if not t.shape:
        return t.itemsize
    return prod(t.shape[dim % len(t.shape) + 1:]) * t.itemsize


def indirect_copy(ctx: OpContext, *, index: int | None, count: int, slice_bytes: int, scatter: bool = False,
                  table: int | None = None, after: tuple = ()) -> int:
    """Load ``count`` indices, generate descriptors on GpSimdE, move ``count`` slices.

    The transfer also waits for ``after`` (a zero fill of its destination); with ``index=None``
    the indices were computed on chip by those instructions instead of loaded.
    """
    b, t = ctx.builder, ctx.target
    parts = min(t.partitions, max(1, count))
    if index is None:
        load, idx_dtype = tuple(after), "int32"
    else:
        idx = ctx.inputs[index]
        idx_dtype = idx.dtype
        load = ctx.ready_deps(index) or (b.dma(max(1, idx.nbytes), src="hbm", dst="sbuf", partitions=parts,
                                               row_bytes=max(idx.itemsize, idx.nbytes // parts)),)
    gen = b.compute("gpsimd", "dma_descriptor_gen", free_size=ceil(count / parts), partitions=parts,
                    dtype=idx_dtype, deps=load)
    deps = (gen, *after, *(ctx.ready_deps(table) if table is not None else ()))
    nbytes = max(1, count * slice_bytes)
    if scatter:
        # read-modify-write at the destination: each slice is read and written in HBM
        return b.dma(nbytes, src="hbm", dst="hbm", row_bytes=slice_bytes, deps=deps, opcode="dma_scatter_add",
                     src_bytes=2 * nbytes, dst_bytes=nbytes)
    return b.dma(nbytes, src="hbm", dst="hbm", row_bytes=slice_bytes, deps=deps, opcode="dma_gather")


@lowering("aten::embedding", "aten::index_select", "aten::take")
def _gather_rows(ctx: OpContext) -> None:
    # embedding(weight, indices), index_select(self, index), take(self, index): slices of input 0
    dim = int(ctx.attrs.get("dim", 0) or 0) if ctx.record.name.endswith("index_select") else 0
    ids = indirect_copy(ctx, index=1, count=ctx.inputs[1].numel, slice_bytes=_slice_bytes(ctx.inputs[0], dim), table=0)
    ctx.set_ready(0, (ids,))


@lowering("aten::gather", "aten::index", "aten::_unsafe_index")
def _gather(ctx: OpContext) -> None:
    src, out = ctx.inputs[0], ctx.outputs[0]
    dim = int(ctx.attrs.get("dim", 0) or 0)
    index = next((i for i in range(1, len(ctx.inputs)) if ctx.inputs[i].numel), 0)
    run = _slice_bytes(src, dim) if ctx.record.name.endswith("index") else src.itemsize
    count = max(1, out.nbytes // max(1, run))
    ctx.set_ready(0, (indirect_copy(ctx, index=index, count=count, slice_bytes=run, table=0),))


@lowering("aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_", "aten::index_add",
          "aten::index_add_", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
          "aten::index_copy", "aten::index_copy_", "aten::scatter_reduce", "aten::scatter_reduce_")
def _scatter(ctx: OpContext) -> None:
    self_t, out = ctx.inputs[0], ctx.outputs[0] if ctx.outputs else ctx.inputs[0]
    src = max(ctx.inputs[1:], key=lambda t: t.nbytes)
    index = next(i for i in range(1, len(ctx.inputs)) if ctx.inputs[i].dtype.startswith(("int", "uint", "bool")))
    dim = int(ctx.attrs.get("dim", 0) or 0)
    run = _slice_bytes(out, dim) if "index" in ctx.record.name else out.itemsize
    first = ()
    if not ctx.record.name.endswith("_"):   # out-of-place: copy self into the output first
        first = (ctx.builder.dma(self_t.nbytes, src="hbm", dst="hbm", row_bytes=self_t.nbytes),)
    ids = indirect_copy(ctx, index=index, count=max(1, src.nbytes // max(1, run)), slice_bytes=run, scatter=True,
                        table=None)
    ctx.set_ready(0, (*first, ids))


@lowering("aten::embedding_dense_backward", "aten::_embedding_bag_backward", "aten::_embedding_bag_dense_backward")
def _embedding_backward(ctx: OpContext) -> None:
    """Each gradient row scatter-added once per index that used it (a bag's row once per member)."""
    grad, index, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    zero = zero_fill(ctx, out)
    row = grad.shape[-1] * grad.itemsize if grad.shape else grad.itemsize
    indirect_copy(ctx, index=1, count=max(1, index.numel), slice_bytes=row, scatter=True, after=(zero,))


@lowering("aten::arange", "aten::linspace", "aten::iota")
def _iota(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [Stage("gpsimd", "iota", free, dtype=_c.outputs[0].dtype)],
                read_inputs=False)


@lowering("aten::tril", "aten::triu", "aten::tril_", "aten::triu_")
def _triangle(ctx: OpContext) -> None:
    elementwise(ctx, lambda free, dtype, full, _c: [Stage("gpsimd", "affine_select", free, dtype=dtype)])


@lowering("aten::cumsum", "aten::cumprod", "aten::cumsum_", "aten::logcumsumexp")
def _scan(ctx: OpContext) -> None:
    # tensor_tensor_scan streams the row once with a carried accumulator: costed as 2N on VectorE.
    elementwise(ctx, lambda free, dtype, full, _c: [Stage("vector", "tensor_tensor", free, dtype=dtype,
                                                          attrs={"alu": "scan"})])


@lowering("aten::_embedding_bag", "aten::_embedding_bag_forward_only")
def _embedding_bag(ctx: OpContext) -> None:
    """Gather every indexed row, then reduce each bag's rows on VectorE (bags on partitions)."""
    weight, indices, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    dim = weight.shape[-1] if weight.shape else 1
    bags = max(1, out.numel // dim) if dim else 1
    parts = min(ctx.target.partitions, bags)
    if out.numel:           # a table of empty rows leaves only the index bookkeeping below
        rows = indirect_copy(ctx, index=1, count=max(1, indices.numel), slice_bytes=dim * weight.itemsize, table=0)
        per_bag = ceil(indices.numel / bags)
        alu = "max" if int(ctx.attrs.get("mode", 0) or 0) == 2 else "add"
        red = ctx.builder.compute("vector", "tensor_reduce", free_size=per_bag * dim, partitions=parts,
                                  dtype=weight.dtype, deps=(rows,), repeat=ceil(bags / parts), out_free=dim, alu=alu,
                                  flops=per_bag * dim)
        if ctx.out_to_hbm[0]:
            ctx.builder.dma(out.nbytes, src="sbuf", dst="hbm", partitions=parts, row_bytes=dim * out.itemsize,
                            deps=(red,))
        ctx.set_ready(0, (red,))
    # offset2bag, bag sizes, max indices: index bookkeeping from the offsets on GpSimdE
    book = [(k, o) for k, o in enumerate(ctx.outputs) if k and o.numel]
    if book:
        gen = ctx.builder.compute("gpsimd", "iota", free_size=ceil(max(o.numel for _, o in book) / parts),
                            partitions=parts, dtype="int32", repeat=len(book))
        for k, o in book:
            if ctx.out_to_hbm[k]:
                ctx.builder.dma(o.nbytes, src="sbuf", dst="hbm", partitions=min(parts, o.numel), row_bytes=o.itemsize,
                          deps=(gen,))
            ctx.set_ready(k, (gen,))


@lowering("aten::index_fill", "aten::index_fill_")
def _index_fill(ctx: OpContext) -> None:
    """Out of place: copy self; then a memset tile written to every indexed slice."""
    self_t, index = ctx.inputs[0], ctx.inputs[1]
    dim = int(ctx.attrs.get("dim", 0) or 0)
    if not ctx.record.name.endswith("_"):
        ctx.builder.dma(self_t.nbytes, src="hbm", dst="hbm", row_bytes=self_t.nbytes, deps=ctx.ready_deps(0))
    fill = zero_fill(ctx, self_t, nbytes=self_t.itemsize)
    ids = indirect_copy(ctx, index=1, count=max(1, index.numel), slice_bytes=_slice_bytes(self_t, dim),
                        after=(fill,))
    ctx.set_ready(0, (ids,))


@lowering("aten::max_unpool2d", "aten::max_unpool3d")
def _max_unpool(ctx: OpContext) -> None:
    """zeros(output), then every value scattered to its recorded index (one element per descriptor)."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    zero = zero_fill(ctx, out)
    ctx.set_ready(0, (indirect_copy(ctx, index=1, count=max(1, x.numel), slice_bytes=x.itemsize,
                                    after=(zero,)),))
