"""VectorE instruction costs (cycles per the NKI ISA docstrings; N = elements per partition).

NC-v3+ VectorE streams 2-4 elements per partition per cycle for single-input streaming ops
(the 512/256 elem/cycle figures); instructions with two tensor inputs or a reduction keep the
ISA's per-element rule, which already encodes their operand-read limits.
"""
from __future__ import annotations

from backend.sim.costs.registry import cost, engine_cycles_ns, is_two_byte
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = ["vector_stream_rate"]

_FAST_TENSOR_TENSOR_ALUS = {"add", "subtract", "multiply"}


def vector_stream_rate(dtype: str, target: NeuronConfig) -> float:
    return target.vector_rate_2byte if is_two_byte(dtype) else target.vector_rate_4byte


def _ns(cycles: float, instr: Instruction, target: NeuronConfig) -> float:
    return engine_cycles_ns("vector", cycles, target, instr)


@cost("vector", "tensor_tensor")
def _tensor_tensor(instr: Instruction, target: NeuronConfig) -> float:
    # 1 cycle/element for bf16 add/sub/mul from SBUF or with one input in PSUM, else 2.
    n = instr.free_size
    fast = instr.attr("psum_input") or (is_two_byte(instr.dtype)
                                        and instr.attr("alu", "add") in _FAST_TENSOR_TENSOR_ALUS)
    return _ns(n if fast else 2 * n, instr, target)


@cost("vector", "tensor_scalar", "tensor_copy", "select", "dropout", "nc_transpose")
def _streaming(instr: Instruction, target: NeuronConfig) -> float:
    return _ns(instr.free_size / vector_stream_rate(instr.dtype, target), instr, target)


@cost("vector", "memset")
def _memset(instr: Instruction, target: NeuronConfig) -> float:
    n = instr.free_size / vector_stream_rate(instr.dtype, target)
    if instr.attr("value", 0) == 0 and is_two_byte(instr.dtype):
        n /= 2
    return _ns(n, instr, target)


@cost("vector", "tensor_tensor_scan")
def _tensor_tensor_scan(instr: Instruction, target: NeuronConfig) -> float:
    # Two tensor inputs and a serial carry: the ISA's two-input rule (2N), whatever the dtype.
    return _ns(2 * instr.free_size, instr, target)


@cost("vector", "tensor_reduce")
def _tensor_reduce(instr: Instruction, target: NeuronConfig) -> float:
    # bf16 add/max reduce two elements per cycle.
    n = instr.free_size
    fast = is_two_byte(instr.dtype) and instr.attr("alu", "add") in ("add", "max")
    return _ns(n / 2 if fast else n, instr, target)


@cost("vector", "reciprocal")
def _reciprocal(instr: Instruction, target: NeuronConfig) -> float:
    return _ns(8 * instr.free_size, instr, target)


@cost("vector", "bn_stats")
def _bn_stats(instr: Instruction, target: NeuronConfig) -> float:
    return _ns(instr.free_size, instr, target)


@cost("vector", "bn_aggr")
def _bn_aggr(instr: Instruction, target: NeuronConfig) -> float:
    return _ns(13 * instr.free_size / 3, instr, target)


@cost("vector", "max8", "match_replace8")
def _max8(instr: Instruction, target: NeuronConfig) -> float:
    # max8: N cycles (ISA docstring); it compares in fp32, so 2-byte inputs are no faster.
    # nc_match_replace8 publishes no cost: assumed one pass over N like max8.
    return _ns(instr.free_size, instr, target)
