"""GpSimdE instruction costs: index generation, masks and software loops on its 8 cores.

iota and affine_select cost ``150 + N`` cycles (ISA docstrings); index-driven work (gathers,
scatter-adds, descriptor generation for indirect DMAs, random numbers) is costed the same way
per element, since it runs as a software loop with the same fixed start cost.
"""
from __future__ import annotations

import backend.sim.assumptions as assumptions
from backend.sim.costs.registry import cost, engine_cycles_ns
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = []


@cost("gpsimd", "iota", "affine_select", "local_gather", "dma_descriptor_gen", "scatter_add", "rng")
def _software_loop(instr: Instruction, target: NeuronConfig) -> float:
    return engine_cycles_ns("gpsimd", assumptions.value("gpsimd.start_cycles") + instr.free_size / target.gpsimd_rate, target, instr)


@cost("gpsimd", "memset", "tensor_copy", "tensor_tensor", "tensor_scalar")
def _streaming(instr: Instruction, target: NeuronConfig) -> float:
    return engine_cycles_ns("gpsimd", instr.free_size / target.gpsimd_rate, target, instr)
