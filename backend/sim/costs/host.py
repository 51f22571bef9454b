"""Host-side work: a fallback op computed by the CPU, costed as a roofline on host rates."""
from __future__ import annotations

from backend.sim.costs.registry import cost
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = ["host_compute_ns"]


def host_compute_ns(flops: int, nbytes: int, target: NeuronConfig) -> float:
    return max(flops / target.host_flops_per_s, nbytes / target.host_bytes_per_s) * 1e9


@cost("host", "host_compute")
def _host(instr: Instruction, target: NeuronConfig) -> float:
    return host_compute_ns(instr.flops // max(1, instr.repeat), instr.nbytes, target)
