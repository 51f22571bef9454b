"""Sorting and selection on VectorE: rows on partitions, the sorted dim on the free axis.

Top-k uses the ISA's 8-wide selection: ``max8`` returns a partition's 8 largest values (N
cycles, N <= 16384) and ``nc_match_replace8`` knocks them out while writing their indices, so
ceil(k/8) rounds of two passes find the top k (smallest-first negates the row first). A row
longer than one instruction or its SBUF share is cut into chunks, and a row that would leave
partitions idle is split across them; every piece keeps its top k, a second round picks among
the candidates (moved to one partition per row by an SBUF->SBUF DMA, indices mapped back by a
GpSimdE local gather).

Full sorts, kthvalue and median take the cheaper of the max8 rounds and a bitonic network:
L(L+1)/2 compare-exchange stages (L = log2 of the padded length P), each a compare, a min and
a max over P/2 pairs (``tensor_tensor``) and two index ``select``s. ASSUMED: match_replace8
costs one pass like max8 (it publishes no cost); the bitonic partner (stride 2^j) is a plain
access pattern. A sort needs its whole row in one partition: a row too long for that declines
and runs on the host. searchsorted/bucketize binary-search on GpSimdE: the boundary row sits
in every partition, each lane searches its values, one local gather and compare per step
(ASSUMED: a step costs like GpSimdE's other software loops, 150 + N cycles per pass).
"""
from __future__ import annotations

from math import ceil, log2

from backend.lowering.builder import OpContext
from backend.lowering.registry import lowering
from backend.lowering.stream import Stage, TileIO, stream, vector_stage
from backend.sim import assumptions
from backend.sim.costs import instruction_ns
from backend.sim.ir import Instruction

__all__ = ["bitonic_stages", "sort_stages", "MAX8_FREE_MAX"]

MAX8_FREE_MAX = 16384           # elements per partition one max8 may read (ISA)
_INDEX_BYTES = 4                # indices travel as int32 on chip


def bitonic_stages(n: int) -> tuple[int, int]:
    """(compare-exchange stages, padded length) of a bitonic sort of ``n`` elements."""
    levels = max(1, ceil(log2(max(2, n))))
    return levels * (levels + 1) // 2, 2 ** levels


def _selection(k: int, free: int, dtype: str, negate: bool) -> list:
    rounds = ceil(k / 8)
    pre = [vector_stage("tensor_scalar", free, dtype, alu="multiply")] if negate else []
    return pre + [vector_stage("max8", free, dtype, count=rounds, out_free=8),
                  vector_stage("match_replace8", free, dtype, count=rounds)]


def _bitonic(n: int, dtype: str) -> list:
    stages, padded = bitonic_stages(n)
    return [vector_stage("tensor_tensor", padded // 2, dtype, 2, count=3 * stages, alu="max"),   # compare, min, max
            vector_stage("select", padded // 2, dtype, 2, count=2 * stages)]                     # carry the indices


def _stages_ns(stages: list, target) -> float:
    return sum(st.count * instruction_ns(Instruction(st.engine, st.opcode, free_size=st.free_size, dtype=st.dtype,
                                                     attrs=st.attrs or None), target) for st in stages)


def sort_stages(n: int, k: int, dtype: str, target) -> list:
    """The cheaper of max8 selection rounds and a bitonic sort, for the k-th of n per row."""
    bitonic = _bitonic(n, dtype)
    if n > MAX8_FREE_MAX:
        return bitonic
    rounds = _selection(k, n, dtype, negate=False)
    return rounds if _stages_ns(rounds, target) <= _stages_ns(bitonic, target) else bitonic


def _rows(ctx: OpContext) -> tuple[int, int, int]:
    """(rows, row length, row run bytes in HBM) along the op's dim; no dim on a median: all of it."""
    x = ctx.inputs[0]
    dim = ctx.attrs.get("dim")
    if not x.shape or (dim is None and "median" in ctx.record.name):
        return 1, max(1, x.numel), max(1, x.numel) * x.itemsize
    dim = int(-1 if dim is None else dim) % len(x.shape)
    n = max(1, x.shape[dim])
    contiguous_row = all(s == 1 for s in x.shape[dim + 1:])
    return max(1, x.numel // n), n, (n if contiguous_row else 1) * x.itemsize


def _store_all(ctx: OpContext, deps: tuple, parts: int) -> None:
    for k, o in enumerate(ctx.outputs):
        if o.numel and ctx.out_to_hbm[k]:
            ctx.builder.dma(o.nbytes, src="sbuf", dst="hbm", partitions=min(parts, o.numel),
                      row_bytes=max(o.itemsize, o.nbytes // min(parts, o.numel)), deps=deps)
        ctx.set_ready(k, deps)


def _whole_rows(ctx: OpContext, stages_for) -> bool:
    """Sort-like ops: whole rows per partition; False (host) when a row does not fit."""
    rows, n, run = _rows(ctx)
    x, t = ctx.inputs[0], ctx.target
    if 2 * n * (x.itemsize + _INDEX_BYTES) > t.sbuf_partition_bytes // 2:
        return False
    parts = min(t.partitions, rows)
    tiles = ceil(rows / parts)
    iota = ctx.builder.compute("gpsimd", "iota", free_size=n, partitions=parts, dtype="int32")   # initial indices
    stores = [TileIO(k, parts * ceil(o.numel / rows) * o.itemsize, ceil(o.numel / rows) * o.itemsize, parts)
              for k, o in enumerate(ctx.outputs) if o.numel]
    stream(ctx, tiles=tiles, partitions=parts, stages=stages_for(n, x.dtype),
           loads=[TileIO(0, parts * n * x.itemsize, run, parts)], stores=stores, extra_deps=(iota,))
    return True


@lowering("aten::sort", "aten::argsort", "aten::msort")
def _sort(ctx: OpContext):
    return _whole_rows(ctx, lambda n, dtype: sort_stages(n, n, dtype, ctx.target))


@lowering("aten::kthvalue", "aten::median", "aten::nanmedian")
def _kth(ctx: OpContext):
    rows, n, _ = _rows(ctx)
    k = int(ctx.attrs.get("k", (n + 1) // 2) or 1)
    side = min(k, n - k + 1)                 # the k-th smallest is the (n-k+1)-th largest
    return _whole_rows(ctx, lambda n, dtype: sort_stages(n, side, dtype, ctx.target))


@lowering("aten::topk")
def _topk(ctx: OpContext) -> None:
    rows, n, run = _rows(ctx)
    x, b, t = ctx.inputs[0], ctx.builder, ctx.target
    k = min(n, max(1, int(ctx.attrs.get("k", 1) or 1)))
    k8 = 8 * ceil(k / 8)
    negate = ctx.attrs.get("largest", True) is False
    split = 1 if rows >= t.partitions else max(1, min(t.partitions // rows, n // assumptions.value("sorting.segment_min")))
    seg = ceil(n / split)
    # a chunk is one max8's reach and, double-buffered, a quarter of the partition's SBUF
    limit = min(MAX8_FREE_MAX, t.sbuf_partition_bytes // (8 * x.itemsize))
    chunks = ceil(seg / limit)
    chunk = ceil(seg / chunks)
    parts = min(t.partitions, rows * split)
    tiles = ceil(rows * split / parts) * chunks
    stages = _selection(k, chunk, x.dtype, negate)
    single = split * chunks == 1
    stores = ([TileIO(kk, parts * k * o.itemsize, k * o.itemsize, parts) for kk, o in enumerate(ctx.outputs) if o.numel]
              if single else [])
    last = stream(ctx, tiles=tiles, partitions=parts, stages=stages, stores=stores,
                  loads=[TileIO(0, parts * chunk * x.itemsize, min(run, chunk * x.itemsize), parts)])
    if single:
        return
    # second round over every piece's k8 candidates, one partition per row
    cand = split * chunks * k8
    rparts = min(t.partitions, rows)
    deps = tuple(last)
    if split > 1:
        deps = (b.dma(rows * cand * (x.itemsize + _INDEX_BYTES), src="sbuf", dst="sbuf", partitions=rparts,
                      row_bytes=k8 * x.itemsize, deps=deps),)
    reps = ceil(rows / rparts) * ceil(k / 8)
    sel = b.compute("vector", "max8", free_size=cand, partitions=rparts, dtype=x.dtype, deps=deps, repeat=reps,
                    out_free=8)
    rep = b.compute("vector", "match_replace8", free_size=cand, partitions=rparts, dtype=x.dtype, deps=(sel,),
                    repeat=reps)
    back = b.compute("gpsimd", "local_gather", free_size=k, partitions=rparts, dtype="int32", deps=(rep,),
                     repeat=ceil(rows / rparts))
    _store_all(ctx, (back,), rparts)


@lowering("aten::searchsorted", "aten::bucketize")
def _searchsorted(ctx: OpContext):
    """Binary search on GpSimdE: every partition holds the boundary row, each lane searches its values."""
    bucketize = ctx.record.name.endswith("bucketize")
    values, bounds = (ctx.inputs[0], ctx.inputs[1]) if bucketize else (ctx.inputs[1], ctx.inputs[0])
    v_i, b_i = (0, 1) if bucketize else (1, 0)
    m = bounds.shape[-1] if bounds.shape else 1
    if m * bounds.itemsize > ctx.target.sbuf_partition_bytes // 2:
        return False
    steps = max(1, ceil(log2(m + 1)))
    per_row = bounds.numel > m              # batched boundaries: each value row has its own
    parts = min(ctx.target.partitions, max(1, values.numel))
    # values per partition per tile: a streamed tile of values (assumption stream.tile_bytes_per_partition)
    per_part = min(ceil(max(1, values.numel) / parts),
                   assumptions.value("stream.tile_bytes_per_partition") // values.itemsize)
    tiles = ceil(max(1, values.numel) / (parts * per_part))
    row = TileIO(b_i, parts * m * bounds.itemsize, m * bounds.itemsize, parts, once=not per_row,
                 hbm_bytes=None if per_row else bounds.nbytes)
    out = ctx.outputs[0]
    stream(ctx, tiles=tiles, partitions=parts,
           stages=[Stage("gpsimd", "local_gather", per_part, count=steps, dtype=bounds.dtype, flops=per_part)],
           loads=[TileIO(v_i, parts * per_part * values.itemsize, per_part * values.itemsize, parts), row],
           stores=[TileIO(0, parts * per_part * out.itemsize, per_part * out.itemsize, parts)])
    return True
