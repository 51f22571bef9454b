"""Registry of per-instruction cost formulas, keyed by (engine, opcode).

A formula returns the duration in ns of ONE hardware instruction on the given target; the
scheduler multiplies by ``repeat`` and adds what depends on timing (dependency waits, DMA
start latency, port conflicts). Compute formulas are written in engine cycles, as the NKI ISA
docstrings state them, and converted with the engine's own clock.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig
from backend.sim.registry import Registry

__all__ = ["cost", "instruction_ns", "registered_costs", "engine_cycles_ns", "is_two_byte"]

CostFn = Callable[[Instruction, NeuronConfig], float]
_COSTS = Registry("cost formula")


def cost(engine: str, *opcodes: str) -> Callable[[CostFn], CostFn]:
    """Register ``fn(instr, target) -> ns`` for opcodes on an engine; duplicates are an error."""
    return _COSTS.decorator(*((engine, op) for op in opcodes))


def instruction_ns(instr: Instruction, target: NeuronConfig) -> float:
    """Duration of one hardware instruction of ``instr`` (explicit durations win)."""
    if instr.duration_ns is not None:
        return float(instr.duration_ns)
    fn = _COSTS.get((instr.engine, instr.opcode))
    if fn is None:
        raise KeyError(f"no cost formula for {instr.engine}:{instr.opcode}; "
                       f"known: {', '.join(f'{e}:{o}' for e, o in sorted(_COSTS.keys()))}")
    return fn(instr, target)


def registered_costs() -> frozenset:
    return _COSTS.keys()


def engine_cycles_ns(engine: str, stream_cycles: float, target: NeuronConfig, instr: Instruction) -> float:
    """ISA cost ``max(MIN_II, stream_cycles)`` plus the static access overhead, in ns.

    Streams whose innermost stride exceeds 16 bytes run at half bandwidth (``strided`` attr).
    """
    if instr.attr("strided"):
        stream_cycles *= 2
    cycles = max(target.min_ii_cycles, stream_cycles) + target.access_overhead_cycles
    return cycles * 1e9 / target.clock_hz(engine)


def is_two_byte(dtype: str) -> bool:
    return dtype in ("bfloat16", "float16")
