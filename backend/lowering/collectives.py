"""Collectives: one instruction on the collectives lane, timed by the topology model.

The process-group backend (``backend.distributed``) reports each collective as a record named
``collective::<name>`` whose attrs say what it is (``collective``, ``nbytes``, ``ranks``,
``topology``, ``algorithm``); ``backend.sim.collectives`` prices it. The collective runs on the
chip's collective cores and DMA rings, not on the compute engines, hence its own lane.
"""
from __future__ import annotations

import dataclasses

from backend.lowering.builder import OpContext
from backend.lowering.registry import lowering
from backend.sim.collectives import COLLECTIVES, collective_cost
from backend.sim.ir import Instruction

__all__ = ["COLLECTIVE_NAMESPACE", "priced_on"]

COLLECTIVE_NAMESPACE = "collective"


@lowering(*(f"{COLLECTIVE_NAMESPACE}::{name}" for name in COLLECTIVES))
def _collective(ctx: OpContext) -> None:
    attrs = ctx.record.attrs
    cost = collective_cost(attrs["collective"], attrs["nbytes"], attrs["ranks"], attrs.get("topology"),
                           attrs.get("algorithm", "auto"))
    ctx.builder.program.add(Instruction("collective", cost.collective, nbytes=cost.nbytes,
                                        duration_ns=cost.time_ns, src="hbm", dst="hbm",
                                        attrs={"algorithm": cost.algorithm, "ranks": cost.ranks}))


def priced_on(records, topology) -> list:
    """The records with every collective priced on ``topology`` (a preset name or a derived
    :class:`~backend.sim.topology.Topology`, e.g. a per-core view), for replaying a kept workload."""
    return [dataclasses.replace(r, attrs={**r.attrs, "topology": topology}) if "collective" in r.attrs else r
            for r in records]
