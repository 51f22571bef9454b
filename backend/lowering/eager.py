"""Eager lowering: one aten OpRecord -> one Program (inputs from HBM, outputs to HBM).

Views cost nothing (kind "view"); host<->device copies are transfers; an op that nothing
lowers, or that the device ran on the host, becomes a host fallback (transfers both ways plus
host compute) so it is never silently free. Every device program pays the launch overhead.
"""
from __future__ import annotations

import logging

from backend.lowering.builder import Builder, OpContext
from backend.lowering.data import base_program, fallback_program, transfer_program
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
    run, e.g. a sort whose rows do not fit SBUF; the op then runs on the host.
    """
    fn = lowering_for(ctx.record.name)
    if fn is None or ctx.record.fallback:
        return False
    before = len(ctx.builder.program.instructions)
    declined = fn(ctx) is False
    emitted = len(ctx.builder.program.instructions) > before
    if declined:
        if emitted:
            raise RuntimeError(f"lowering for {ctx.record.name} declined after emitting instructions")
        return False
    empty = all(t.numel == 0 for t in ctx.record.outputs) if ctx.record.outputs else False
    if not emitted and not empty and not is_free_op(ctx.record.name):
        raise RuntimeError(f"lowering for {ctx.record.name} emitted no instructions; "
                           f"inputs {[t.shape for t in ctx.record.inputs]}")
    return True


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
