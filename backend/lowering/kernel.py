"""Fused kernels: a group of ops lowered as ONE program whose intermediates stay in SBUF.

The compile path passes the group's records in execution order plus ``links``: which input
of which record is which output of an earlier record. A linked intermediate stays in SBUF
(its consumer depends on the producer's tile groups, so elementwise chains pipeline tile by
tile) unless the live intermediates exceed the SBUF budget; then the largest are spilled:
stored to HBM and re-read, counted in ``Program.spill_bytes``. One launch per kernel.

A compiled graph may also hand values from one kernel to the next in SBUF: the producer is
lowered without storing them, the consumer with ``resident_inputs``, which its lowerings see
as operands already on chip since the kernel began (they load nothing for them).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from math import prod

from backend.lowering.builder import Builder, OpContext
from backend.lowering.data import fallback_into
from backend.lowering.eager import lower_into
from backend.lowering.stream import STREAM_BUFS
from backend.sim import assumptions
from backend.sim.flops import base_name, is_matmul_like, op_flops
from backend.sim.descriptors import OpRecord
from backend.sim.ir import Program
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target

__all__ = ["lower_kernel"]

Ref = tuple[int, int]     # (record position in the group, input or output position)
# Stands in for "in SBUF when the kernel starts": lowerings take it as an operand's ready id
# (so they skip its load), and the kernel's builder drops it from every dependency list.
_AT_START = -1


class _KernelBuilder(Builder):
    """A Builder whose instructions ignore the at-start marker among their dependencies."""

    def _add(self, ins, reads: tuple = (), writes: tuple = ()) -> int:
        if _AT_START in ins.deps:
            ins.deps = tuple(d for d in ins.deps if d != _AT_START)
        return super()._add(ins, reads, writes)


def _peak(resident: set, sizes: dict, last_use: dict, n: int) -> int:
    return max((sum(sizes[r] for r in resident if r[0] <= j <= last_use[r]) for j in range(n)), default=0)


def _through_views(records: Sequence[OpRecord], links: dict) -> dict:
    """Point links at a view's output to what the view aliases; a view of an HBM input
    leaves its consumers reading HBM. Views then carry no data of their own."""
    def root(ref):
        while ref is not None and records[ref[0]].is_view:
            ref = links.get((ref[0], 0))
        return ref

    resolved = {c: root(p) for c, p in links.items() if not records[c[0]].is_view}
    return {c: p for c, p in resolved.items() if p is not None}


# The operand whose rows are the output's rows: a matmul needs one block of its rows at a time.
_LEFT_OPERAND = {"aten::mm": 0, "aten::bmm": 0, "aten::matmul": 0, "aten::linear": 0, "aten::addmm": 1, "aten::baddbmm": 1}


def _footprint(consumer: OpRecord, index: int, whole: int, t: NeuronConfig, tile: int) -> int:
    """SBUF bytes an intermediate occupies while ``consumer`` reads it as input ``index``."""
    name, desc = base_name(consumer.name), consumer.inputs[index]
    block = STREAM_BUFS * t.partitions           # double-buffered, one row per partition
    if "attention" in name and len(desc.shape) >= 3:
        # flash attention works one (batch, head) slice at a time
        return min(whole, STREAM_BUFS * whole // max(1, prod(desc.shape[:-2])))
    if is_matmul_like(name):
        if _LEFT_OPERAND.get(name) == index and len(desc.shape) >= 2:
            return min(whole, block * desc.shape[-1] * desc.itemsize)
        return whole                             # reused across every output tile
    if ("softmax" in name or "norm" in name) and desc.shape:
        return min(whole, block * max(tile, desc.shape[-1] * desc.itemsize))   # whole rows
    return min(whole, block * tile)


def _footprints(records: Sequence[OpRecord], links: Mapping, t: NeuronConfig) -> dict:
    """SBUF bytes each linked intermediate occupies while it is live.

    A fused kernel runs its ops tile by tile (the consumer waits on the producer's tile groups),
    so an intermediate is live one tile group at a time: ``STREAM_BUFS`` buffers of a stream tile
    on every partition for pointwise and reducing consumers, of whole rows for softmax and
    norms, of a block of rows for the left operand of a matmul, of one (batch, head) slice for
    attention. A matmul reuses its other operand across all its output tiles: that one stays
    whole.
    """
    tile = assumptions.value("stream.tile_bytes_per_partition")
    sizes: dict = {}
    for (c, i), p in links.items():
        need = _footprint(records[c], i, records[p[0]].outputs[p[1]].nbytes, t, tile)
        sizes[p] = max(sizes.get(p, 0), need)
    return sizes


def _plan_residency(records: Sequence[OpRecord], links: Mapping, sizes: Mapping,
                    budget: int) -> tuple[set, int, dict]:
    """Intermediates kept in SBUF (``sizes``: their footprints), the bytes spilled (the whole
    tensor stored, plus one load per consumer), and each intermediate's last consumer."""
    last_use: dict = {}
    consumers: dict = {}
    for (c, _), p in links.items():
        last_use[p] = max(last_use.get(p, c), c)
        consumers[p] = consumers.get(p, 0) + 1
    resident = set(links.values())
    spill = 0
    while resident and _peak(resident, sizes, last_use, len(records)) > budget:
        victim = max(resident, key=lambda r: (sizes[r], r))
        resident.discard(victim)
        spill += records[victim[0]].outputs[victim[1]].nbytes * (1 + consumers[victim])
    return resident, spill, last_use


def lower_kernel(name: str, records: Sequence[OpRecord], target: str | NeuronConfig = DEFAULT_NEURON_TARGET, *,
                 links: Mapping[Ref, Ref] | None = None, outputs: Collection[Ref] | None = None,
                 inputs_from: Sequence[Sequence] | None = None, outputs_to_hbm: Sequence[Sequence] | None = None,
                 nodes: Sequence[str] = (), resident_inputs: Collection[Collection[Ref]] = ()) -> Program:
    """Lower a fused group of ops as one Program.

    links: ``{(consumer_pos, input_pos): (producer_pos, output_pos)}`` for every operand that
        is produced inside the group.
    outputs: producer outputs ``(pos, k)`` that leave the kernel (stored to HBM). Default: every
        output that no link consumes.
    inputs_from / outputs_to_hbm: the same, in the compile path's per-record form (for record j,
        input i comes from ``inputs_from[j][i]`` = (producer, k) or None; output k is stored
        when ``outputs_to_hbm[j][k]``); used when ``links`` / ``outputs`` are not given.
    resident_inputs: the values a previous kernel left in SBUF, each as the
        ``(consumer_pos, input_pos)`` operands that read it.
    """
    t = get_target(target)
    handed_over = sum(records[refs[0][0]].inputs[refs[0][1]].nbytes for refs in resident_inputs if refs)
    resident_inputs = {ref for refs in resident_inputs for ref in refs}
    if links is None and inputs_from:
        links = {(j, i): tuple(src) for j, srcs in enumerate(inputs_from) for i, src in enumerate(srcs)
                 if src is not None}
    if outputs is None and outputs_to_hbm:
        outputs = {(j, k) for j, flags in enumerate(outputs_to_hbm) for k, flag in enumerate(flags) if flag}
    links = dict(links or {})
    for (c, i), (p, k) in links.items():
        if not (0 <= p < c < len(records)) or i >= len(records[c].inputs) or k >= len(records[p].outputs):
            raise ValueError(f"{name}: bad link {(c, i)} <- {(p, k)}")
    links = _through_views(records, links)
    consumed = set(links.values())
    escaping = set(outputs) if outputs is not None else {
        (j, k) for j, r in enumerate(records) for k in range(len(r.outputs)) if (j, k) not in consumed}
    program = Program(name, "kernel", launch_overhead_ns=t.launch_overhead_ns,
                      flops=sum(op_flops(r) for r in records), nodes=tuple(nodes),
                      input_shapes=", ".join(f"{d.dtype}{list(d.shape)}" for j, r in enumerate(records)
                                             for i, d in enumerate(r.inputs)
                                             if (j, i) not in links and (j, i) not in resident_inputs),
                      output_shapes=", ".join(f"{records[j].outputs[k].dtype}{list(records[j].outputs[k].shape)}"
                                              for j, k in sorted(escaping)),
                      source=next((r.source for r in records if r.source), None))
    footprints = _footprints(records, links, t)
    resident, program.info.spill_bytes, last_use = _plan_residency(
        records, links, footprints, int(assumptions.value("kernel.resident_fraction") * t.sbuf_usable_bytes))
    b = _KernelBuilder(program, t)
    ready: dict = {}            # producer output -> instruction ids after which it is available
    for j, rec in enumerate(records):
        src = [links.get((j, i)) for i in range(len(rec.inputs))]
        if rec.is_view:         # aliases cost nothing; links already point through them
            continue
        # what stays resident while this op runs (the values handed over from the previous
        # kernel: until this one is done) is not the op's to plan with
        b.sbuf_reserved = handed_over + sum(footprints[r] for r in resident if r[0] <= j <= last_use[r])
        b.base_deps = tuple(d for s in src if s and s not in resident for d in ready.get(s, ())[-1:])
        in_ready = [ready.get(s) if s in resident else (_AT_START,) if (j, i) in resident_inputs else None
                    for i, s in enumerate(src)]
        out_hbm = [(j, k) in escaping or ((j, k) in consumed and (j, k) not in resident)
                   for k in range(len(rec.outputs))]
        ctx = OpContext(rec, t, b, in_ready=in_ready, out_to_hbm=out_hbm)
        before = len(program.instructions)
        if not lower_into(ctx):
            last = fallback_into(b, rec)
            ctx.out_ready = [(last,)] * len(rec.outputs)
        last_id = (len(program.instructions) - 1,) if len(program.instructions) > before else ()
        for k in range(len(rec.outputs)):
            ready[(j, k)] = tuple(ctx.out_ready[k] or last_id)
    b.base_deps, b.sbuf_reserved = (), 0
    b.note_sbuf(handed_over + _peak(resident, footprints, last_use, len(records)))
    return program
