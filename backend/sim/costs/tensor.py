"""TensorE: nc_matmul and its transpose form, from the nc_matmul ISA docstring.

Average cost of back-to-back matmuls is ``max(min(64, N_stationary), N_moving)`` cycles, 4x for
fp32 inputs (the engine runs fp32 at quarter rate); fp8 runs at the target's fp8 rate.
"""
from __future__ import annotations

import backend.sim.assumptions as assumptions
from backend.sim.costs.registry import cost
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = ["matmul_cycles"]


def matmul_cycles(stationary_free: int, moving_free: int, dtype: str, target: NeuronConfig) -> float:
    base = max(min(assumptions.value("tensor.matmul_min_stationary_cycles"), stationary_free), moving_free)
    if dtype == "float32":
        return base / target.fp32_matmul_rate
    if dtype.startswith("float8"):
        return base / target.fp8_matmul_rate
    return float(base)


@cost("tensor", "nc_matmul", "nc_transpose")
def _matmul_ns(instr: Instruction, target: NeuronConfig) -> float:
    cycles = matmul_cycles(instr.stationary_free, instr.free_size, instr.dtype, target)
    # The ISA figure is already the pipelined average, so no MIN_II floor; whether the access
    # overhead comes on top of it is an assumption (tensor.matmul_access_overhead_share).
    share = assumptions.value("tensor.matmul_access_overhead_share")
    return (cycles + share * target.access_overhead_cycles) * 1e9 / target.tensor_clock_hz
