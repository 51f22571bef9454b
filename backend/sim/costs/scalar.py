"""ScalarE instruction costs: activation functions and copies, ``max(MIN_II, N)`` cycles.

The activation unit fuses ``f(x * scale + bias)`` and an optional free-axis reduction at no
extra cost; NC-v4 streams two 2-byte elements per partition per cycle.
"""
from __future__ import annotations

from backend.sim.costs.registry import cost, engine_cycles_ns, is_two_byte
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = []


@cost("scalar", "activation", "activation_reduce", "tensor_copy", "tensor_scalar")
def _activation(instr: Instruction, target: NeuronConfig) -> float:
    rate = target.scalar_rate_2byte if is_two_byte(instr.dtype) else 1.0
    return engine_cycles_ns("scalar", instr.free_size / rate, target, instr)
