"""Per-kernel simulated cost for the graph log: the kernels of one graph fed to a private
NeuronCore session on the selected target, through the same path a profile uses. The cost is
a steady-state call's: relayouts and hoisted kernels, paid at the first call, are left out, and
the graph's one launch (one NEFF per call) is charged to the first kernel."""
from __future__ import annotations

from dataclasses import dataclass

from backend.lowering import EagerSession
from backend.recording import current_target

from .feed import feed_kernel, skip_first_call

__all__ = ["KernelCost", "cost_kernels"]


@dataclass(slots=True)
class KernelCost:
    """Simulated cost of one kernel on the target it was costed on."""

    name: str
    kind: str
    time_ns: float
    hbm_bytes: int
    launches: int = 1       # launches it pays: 1 for the graph's first kernel, else 0


def cost_kernels(kernels: list, target=None) -> tuple[dict, str]:
    """Simulate ``kernels`` in order; returns (kernel name -> KernelCost, target name)."""
    target = target or current_target()
    session = EagerSession(target)
    skip_first_call(session, kernels)
    costs: dict = {}
    launch = True
    for kernel in kernels:
        first = len(session.trace.ops)
        if feed_kernel(session, kernel, launch=launch):
            launch = False
        ops = session.trace.ops[first:]
        costs[kernel.name] = KernelCost(
            name=kernel.name, kind=kernel.kind, time_ns=sum(op.time_ns for op in ops),
            hbm_bytes=sum(op.hbm_bytes for op in ops), launches=sum(op.launch_overhead_ns > 0 for op in ops))
    return costs, getattr(target, "name", str(target))
