"""DMA costs: the busy time of each DMA engine a transfer spans.

A transfer of ``nbytes`` in ``descriptors`` contiguous chunks spreads over ``dma_engines``
engines (8 SBUF partitions per engine). Each engine moves its share at the sustained per-engine
rate, capped by its slice of the core's HBM bandwidth (1/``dma_engines`` of it, so all engines
at once never move more than the core's share) for every end of the transfer in HBM: an
HBM-to-HBM copy reads and writes HBM, so it crosses HBM twice per byte. Each engine also pays
one 256-byte slot per descriptor, which makes sub-256 B chunks overhead-bound. The ~1.3 us semaphore-to-start
latency is not engine busy time: the scheduler adds it before the data moves, and queued
transfers overlap it with the previous transfer.
"""
from __future__ import annotations

from math import ceil

from backend.sim.costs.registry import cost
from backend.sim.ir import Instruction
from backend.sim.presets import NeuronConfig

__all__ = ["dma_engine_ns"]


def dma_engine_ns(nbytes: int, descriptors: int, engines: int, src: str, dst: str, target: NeuronConfig) -> float:
    engines = max(1, engines)
    bytes_per_s = target.dma_engine_bytes_per_s
    if "host" in (src, dst):
        bytes_per_s = min(bytes_per_s, target.host_link_bytes_per_s / engines)
    elif "hbm" in (src, dst):
        crossings = (src == "hbm") + (dst == "hbm")
        bytes_per_s = min(bytes_per_s, target.hbm_bytes_per_s / (target.dma_engines * crossings))
    per_engine_descriptors = ceil(max(1, descriptors) / engines)
    move_ns = nbytes / engines / bytes_per_s * 1e9
    overhead_ns = per_engine_descriptors * target.dma_descriptor_overhead_bytes / target.dma_engine_bytes_per_s * 1e9
    return move_ns + overhead_ns


@cost("dma", "dma_copy", "dma_gather", "dma_scatter_add", "dma_transpose")
def _dma(instr: Instruction, target: NeuronConfig) -> float:
    return dma_engine_ns(instr.nbytes, instr.descriptors, instr.dma_engines, instr.src, instr.dst, target)
