"""Eager lowering: one aten OpRecord -> one Program (inputs from HBM, outputs to HBM).

Views cost nothing (kind "view"); host<->device copies are transfers; an op that nothing
lowers, or that the device ran on the host, becomes a host fallback (transfers both ways plus
host compute) so it is never silently free. Every device program pays the launch overhead.
"""
from __future__ import annotations

import logging

from backend.lowering.builder import Builder, OpContext
from backend.lowering.data import base_program, fallback_program, transfer_program, zero_fill
from backend.lowering.registry import is_free_op, lowering_for
from backend.sim.descriptors import OpRecord
from backend.sim.flops import base_name
from backend.sim.ir import Program
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target

__all__ = ["lower", "lower_into", "HOST_ONLY_OPS"]

log = logging.getLogger(__name__)
_warned: set[str] = set()

# Ops that stay host fallbacks on purpose. Their output's size depends on the data, so the host
# must read the values before it can even allocate the result, and Neuron graphs are compiled
# for static shapes (torch-neuronx runs these on the CPU as well).
HOST_ONLY_OPS = frozenset({
    "aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::argwhere",
})


def lower_into(ctx: OpContext) -> bool:
    """Append the op's instructions to ``ctx.builder``; False when nothing lowers it.

    A lowering returns ``False`` (having emitted nothing) to decline a shape the device cannot
    run, e.g. a sort whose rows do not fit SBUF; the op then runs on the host. An op with no
    work (every output empty, e.g. an expert given no tokens) emits nothing: its program costs
    only its launch.
    """
    fn = lowering_for(ctx.record.name)
    if fn is None or ctx.record.fallback:
        return False
    record = ctx.record
    written = record.outputs or record.inputs       # an in-place op without outputs writes its inputs
    if written and all(t.numel == 0 for t in written):
        return True
    before = len(ctx.builder.program.instructions)
    declined = fn(ctx) is False
    emitted = len(ctx.builder.program.instructions) > before
    if declined:
        if emitted:
            raise RuntimeError(f"lowering for {record.name} declined after emitting instructions")
        return False
    if not emitted and not is_free_op(record.name):
        if not any(t.numel == 0 for t in record.inputs):
            raise RuntimeError(f"lowering for {record.name} emitted no instructions; "
                               f"inputs {[t.shape for t in record.inputs]}")
        _fill_outputs(ctx)
    return True


def _fill_outputs(ctx: OpContext) -> None:
    """Write the outputs of an op whose empty inputs leave nothing to compute (a matmul over
    an empty inner dimension, a loss over no elements): they hold its fill value (0, the
    padding, NaN for a mean), which costs what writing that many constants costs."""
    for k, out in enumerate(ctx.record.outputs):
        if out.numel == 0:
            continue
        if ctx.out_to_hbm[k]:
            last = zero_fill(ctx, out)
        else:
            free = max(1, min(-(-out.numel // ctx.target.partitions), 2048))
            last = ctx.builder.compute("vector", "memset", free_size=free, dtype=out.dtype, value=0)
        ctx.set_ready(k, (last,))


def lower(record: OpRecord, target: str | NeuronConfig = DEFAULT_NEURON_TARGET) -> Program:
    """The Program one eagerly executed op runs on ``target``."""
    t = get_target(target)
    if record.is_view:
        return base_program(record, t, "view")
    if record.transfer:
        return transfer_program(record, t)
    program = base_program(record, t, "op")
    if not lower_into(OpContext(record, t, Builder(program, t))):
        if not record.fallback and record.name not in _warned:
            _warned.add(record.name)
            host_only = base_name(record.name) in HOST_ONLY_OPS
            why = "host-only (data-dependent output shape)" if host_only else "no lowering"
            log.info("%s for %s: costed as a host fallback", why, record.name)
        return fallback_program(record, t)
    return program
