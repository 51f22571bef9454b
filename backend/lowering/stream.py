"""Tile pipelines for streaming ops: load a tile, run a chain of engine instructions, store.

Elementwise ops, activations, row-wise reductions and norms all have this shape. Tiles are
[partitions, free] slices of SBUF; ``bufs`` buffers per operand let the load of tile i+1 and
the store of tile i-1 overlap the compute of tile i. Tiles are emitted in at most
``max_groups`` groups whose instructions carry ``repeat`` = tiles in the group, so a tensor of
any size costs the simulator a bounded number of entries while the pipeline keeps its shape.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import ceil

from backend.lowering.builder import OpContext, itemsize, split_even
from backend.sim import assumptions
from backend.sim.presets import NeuronConfig

__all__ = ["STREAM_BUFS", "Stage", "TileIO", "stream", "elementwise_tiling", "plane_stream", "plane_tiling", "vector_stage",
           "scalar_stage"]

# Tile sizes and group counts are modelling assumptions (backend.sim.assumptions): stream.tile_bytes_
# per_partition (8 KiB, past the >= 4 KiB DMA knee), stream.plane_bytes_per_partition (plane ops
# hold every operand's share of a plane at once) and stream.max_groups.
# Two buffers per operand (double buffering) overlap a tile's load and store with the compute of
# its neighbours, as the NKI tutorials' tile pipelines do.
STREAM_BUFS = 2


@dataclass(frozen=True)
class Stage:
    """``count`` instructions per tile of ``free_size`` elements per partition on one engine."""

    engine: str
    opcode: str
    free_size: int
    count: int = 1
    dtype: str = "float32"
    out_dtype: str | None = None
    n_inputs: int = 1
    src: str = "sbuf"
    dst: str = "sbuf"
    flops: int = 0                  # per instruction
    out_free: int | None = None
    attrs: dict = field(default_factory=dict)


def vector_stage(opcode: str, free: int, dtype: str, n_inputs: int = 1, *, count: int = 1, out_free: int | None = None,
        **attrs) -> Stage:
    """A VectorE stage; one FLOP per element streamed."""
    return Stage("vector", opcode, free, count=count, dtype=dtype, n_inputs=n_inputs, flops=free, out_free=out_free,
                 attrs=attrs)


def scalar_stage(free: int, dtype: str, func: str, *, count: int = 1, opcode: str = "activation") -> Stage:
    """A ScalarE activation stage; a transcendental counts ~4 FLOPs per element."""
    return Stage("scalar", opcode, free, count=count, dtype=dtype, flops=4 * free, attrs={"func": func})


@dataclass(frozen=True)
class TileIO:
    """Operand ``index`` of the record moved per tile (or once, for broadcast operands)."""

    index: int
    nbytes: int                     # per tile (or in total when once)
    row_bytes: int                  # contiguous bytes per DMA descriptor
    partitions: int = 128
    once: bool = False
    hbm_bytes: int | None = None    # HBM-side bytes when they differ (replicated broadcast)


def elementwise_tiling(numel: int, dtype: str, target: NeuronConfig) -> tuple[int, int, int]:
    """(tiles, partitions, free elements per partition) covering ``numel`` elements."""
    numel = max(1, numel)
    partitions = min(target.partitions, numel)
    free_target = max(1, assumptions.value("stream.tile_bytes_per_partition") // itemsize(dtype))
    if numel <= partitions * free_target:
        return 1, partitions, ceil(numel / partitions)
    tiles = ceil(numel / (partitions * free_target))
    return tiles, partitions, ceil(numel / (tiles * partitions))


def stream(ctx: OpContext, *, tiles: int, partitions: int, stages: list[Stage], loads: list[TileIO],
           stores: list[TileIO], bufs: int = STREAM_BUFS, max_groups: int | None = None, extra_deps: tuple = (),
           extra_sbuf_bytes: int = 0) -> list[int]:
    """Emit the pipeline; returns the last compute instruction of each tile group."""
    if not stages:
        raise ValueError(f"{ctx.record.name}: a tile pipeline needs at least one compute stage")
    b = ctx.builder
    sizes = split_even(tiles, max_groups or assumptions.value("stream.max_groups"))
    groups = len(sizes)
    once_deps = list(extra_deps)
    for io in (io for io in loads if io.once):
        if ctx.in_sbuf(io.index):
            once_deps.extend(ctx.ready_deps(io.index))
        else:
            once_deps.append(b.dma(io.nbytes, src="hbm", dst="sbuf", partitions=io.partitions,
                                   row_bytes=io.row_bytes, src_bytes=io.hbm_bytes))
    per_tile = [io for io in loads if not io.once]
    last_stage: list[int] = []
    store_ids: list[tuple] = []
    for g, reps in enumerate(sizes):
        # A buffer slot is free again once the group that used it `bufs` groups ago is done.
        war = (last_stage[g - bufs],) if g >= bufs else ()
        deps = list(once_deps)
        for io in per_tile:
            if ctx.in_sbuf(io.index):
                deps.extend(ctx.ready_deps(io.index, g, groups))
            else:
                deps.append(b.dma(io.nbytes, src="hbm", dst="sbuf", partitions=io.partitions,
                                  row_bytes=io.row_bytes, deps=war, repeat=reps))
        prev = tuple(deps)
        for s, st in enumerate(stages):
            if s == len(stages) - 1 and g >= bufs:
                prev = prev + store_ids[g - bufs]      # output slot still being stored
            prev = (b.compute(st.engine, st.opcode, free_size=st.free_size, partitions=partitions,
                              dtype=st.dtype, out_dtype=st.out_dtype, n_inputs=st.n_inputs, src=st.src,
                              dst=st.dst, deps=prev, repeat=reps * st.count, flops=st.flops,
                              out_free=st.out_free, **st.attrs),)
        last_stage.append(prev[0])
        group_stores = []
        for io in stores:
            # outputs the record does not list (an in-place op's self) are stored
            if io.index >= len(ctx.out_to_hbm) or ctx.out_to_hbm[io.index]:
                group_stores.append(b.dma(io.nbytes, src="sbuf", dst="hbm", partitions=io.partitions,
                                          row_bytes=io.row_bytes, deps=prev, repeat=reps))
        store_ids.append(tuple(group_stores))
    for io in stores:
        ctx.set_ready(io.index, last_stage)
    # operands already in SBUF and outputs that stay there are a fused kernel's residents, which
    # it books itself: only the tiles this op brings in or sends out take buffers here
    stored = [io for io in stores if io.index >= len(ctx.out_to_hbm) or ctx.out_to_hbm[io.index]]
    tile_bytes = sum(io.nbytes for io in per_tile if not ctx.in_sbuf(io.index)) + sum(io.nbytes for io in stored)
    once_bytes = sum(io.nbytes for io in loads if io.once and not ctx.in_sbuf(io.index))
    b.note_sbuf(bufs * tile_bytes + once_bytes + extra_sbuf_bytes)
    return last_stage


def plane_tiling(ctx: OpContext, planes: int, loads: tuple, stores: tuple) -> tuple[int, int, Callable]:
    """(tiles, partitions, free) for an op on whole planes (an image channel, a row).

    Planes go to partitions; small planes are packed several to a partition (one instruction
    then spans them all, as a multi-dim access pattern); a plane too big for its SBUF share is
    cut into bands (the few halo rows a window needs at a band edge are not counted).
    ``free(desc)`` is the elements of operand ``desc`` per partition per tile.
    """
    t = ctx.target
    planes = max(1, planes)
    ops = [ctx.inputs[i] for i in loads] + [ctx.outputs[k] for k in stores if k < len(ctx.outputs)]
    plane_bytes = max(1, sum(ceil(d.numel / planes) * d.itemsize for d in ops))
    share = assumptions.value("stream.plane_bytes_per_partition")
    bands = ceil(plane_bytes / share)
    pack = max(1, min(ceil(planes / t.partitions), share // plane_bytes))
    slots = ceil(planes / pack)
    partitions = min(t.partitions, slots)
    tiles = ceil(slots / partitions) * bands

    def free(desc) -> int:
        return max(1, ceil(desc.numel * pack / (planes * bands)))

    return tiles, partitions, free


def plane_stream(ctx: OpContext, planes: int, stages_for: Callable, *, loads: tuple = (0,), stores: tuple = (0,),
                 extra_deps: tuple = ()) -> list[int]:
    """Stream a plane op: ``stages_for(free)`` builds the stages from ``free(desc)`` sizes."""
    tiles, parts, free = plane_tiling(ctx, planes, loads, stores)

    def io(index: int, desc) -> TileIO:
        return TileIO(index, parts * free(desc) * desc.itemsize, free(desc) * desc.itemsize, parts)

    return stream(ctx, tiles=tiles, partitions=parts, stages=stages_for(free), extra_deps=extra_deps,
                  loads=[io(i, ctx.inputs[i]) for i in loads if ctx.inputs[i].numel],
                  stores=[io(k, ctx.outputs[k]) for k in stores if k < len(ctx.outputs) and ctx.outputs[k].numel])
