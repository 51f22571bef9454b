"""Helpers that emit instructions with their memory traffic, and the per-op lowering context.

``Builder`` keeps the traffic bookkeeping (which level each instruction reads and writes) in
one place so lowerings only say what runs. ``OpContext`` tells a lowering where its operands
live: in HBM (eager, or spilled) or already on chip in SBUF (an intermediate of a fused
kernel), and whether each output must be stored to HBM.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import ceil

from backend.sim.descriptors import DTYPE_BYTES, OpRecord, TensorDesc
from backend.sim.ir import Instruction, Program
from backend.sim.presets import NeuronConfig

__all__ = ["Builder", "OpContext", "Emitter", "itemsize", "dma_engines_for", "split_even"]


def itemsize(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype, 4)


def dma_engines_for(partitions: int, target: NeuronConfig) -> int:
    """Engines a transfer to or from SBUF spans: one per 8 partitions."""
    return max(1, min(target.dma_engines, ceil(partitions / target.dma_partitions_per_engine)))


def split_even(total: int, parts: int) -> list[int]:
    """``total`` items in ``parts`` groups whose sizes differ by at most one (no empty groups)."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _count(ins: Instruction, level: str, kind: str, nbytes: int) -> None:
    if level == "host" or not nbytes:      # host memory is not a device level
        return
    key = f"{level}_{kind}_bytes"
    if ins.traffic is None:
        ins.traffic = {}
    ins.traffic[key] = ins.traffic.get(key, 0) + nbytes


class Builder:
    """Appends instructions to a Program and fills in their traffic counters."""

    def __init__(self, program: Program, target: NeuronConfig):
        self.program = program
        self.target = target
        # Deps every new instruction takes (a fused op whose input was spilled to HBM waits for it).
        self.base_deps: tuple = ()
        # SBUF bytes other values hold while the current op runs (a fused kernel's resident
        # intermediates): the op's own plan gets what is left, and its peak counts them.
        self.sbuf_reserved: int = 0

    def _add(self, ins: Instruction, reads: tuple = (), writes: tuple = ()) -> int:
        if self.base_deps:
            ins.deps = tuple(sorted(set(ins.deps) | set(self.base_deps)))
        for level, nbytes in reads:
            _count(ins, level, "read", nbytes)
        for level, nbytes in writes:
            _count(ins, level, "write", nbytes)
        return self.program.add(ins)

    def dma(self, nbytes: int, *, src: str, dst: str, partitions: int = 128, row_bytes: int | None = None,
            deps=(), repeat: int = 1, opcode: str = "dma_copy", src_bytes: int | None = None,
            dst_bytes: int | None = None, queue: int | None = None) -> int:
        """One transfer of ``nbytes`` (per repeat) in contiguous rows of ``row_bytes``.

        Transfers touching SBUF span one engine per 8 partitions; others use every engine.
        ``src_bytes`` / ``dst_bytes`` override the bytes counted at either end when they differ
        from what the engines move (a broadcast load reads its source once; a casting copy
        reads 4-byte and writes 2-byte elements). ``queue``: the DMA queue it is submitted to,
        if the program decides it (``Instruction.dma_queue``).
        """
        t = self.target
        row = max(1, row_bytes or nbytes)
        on_chip = "sbuf" in (src, dst)
        engines = dma_engines_for(partitions, t) if on_chip else t.dma_engines
        ins = Instruction("dma", opcode, repeat=repeat, partitions=partitions, nbytes=nbytes,
                          descriptors=ceil(nbytes / row), dma_engines=engines, src=src, dst=dst,
                          deps=tuple(sorted(set(deps))), dma_queue=queue)
        read = (nbytes if src_bytes is None else src_bytes) * repeat
        write = (nbytes if dst_bytes is None else dst_bytes) * repeat
        return self._add(ins, reads=((src, read),), writes=((dst, write),))

    def compute(self, engine: str, opcode: str, *, free_size: int, partitions: int = 128, dtype: str = "float32",
                out_dtype: str | None = None, n_inputs: int = 1, src: str = "sbuf", dst: str = "sbuf",
                deps=(), repeat: int = 1, flops: int = 0, out_free: int | None = None, **attrs) -> int:
        """A Vector/Scalar/GpSimd instruction over a [partitions, free_size] tile."""
        out_free = free_size if out_free is None else out_free
        ins = Instruction(engine, opcode, repeat=repeat, partitions=partitions, free_size=free_size, dtype=dtype,
                          src=src, dst=dst, deps=tuple(sorted(set(deps))), flops=flops * repeat,
                          attrs=attrs or None)
        read = partitions * free_size * itemsize(dtype) * n_inputs * repeat
        write = partitions * out_free * itemsize(out_dtype or dtype) * repeat
        return self._add(ins, reads=((src, read),), writes=((dst, write),))

    def matmul(self, *, k: int, m: int, n: int, dtype: str, deps=(), repeat: int = 1,
               opcode: str = "nc_matmul") -> int:
        """``repeat`` nc_matmuls of stationary [k, m] and moving [k, n] into PSUM [m, n] fp32."""
        ins = Instruction("tensor", opcode, repeat=repeat, partitions=k, free_size=n, stationary_free=m,
                          dtype=dtype, src="sbuf", dst="psum", deps=tuple(sorted(set(deps))),
                          flops=2 * k * m * n * repeat)
        read = (k * m + k * n) * itemsize(dtype) * repeat
        return self._add(ins, reads=(("sbuf", read),), writes=(("psum", m * n * 4 * repeat),))

    def host(self, opcode: str, *, flops: int, nbytes: int, deps=()) -> int:
        ins = Instruction("host", opcode, flops=flops, nbytes=nbytes, src="host", dst="host",
                          deps=tuple(sorted(set(deps))))
        return self._add(ins)

    def note_sbuf(self, nbytes: int) -> None:
        info = self.program.info
        info.sbuf_peak_bytes = max(info.sbuf_peak_bytes, int(nbytes) + self.sbuf_reserved)

    def note_psum(self, nbytes: int) -> None:
        info = self.program.info
        info.psum_peak_bytes = max(info.psum_peak_bytes, int(nbytes))


@dataclass
class OpContext:
    """What one op's lowering needs: the record, the target, where operands live.

    in_ready[i] is None when input i is in HBM; otherwise the instruction indices (one per
    tile group, or one for the whole tensor) after which it is in SBUF. Lowerings set
    out_ready[k] the same way so fused consumers can start per tile group.
    """

    record: OpRecord
    target: NeuronConfig
    builder: Builder
    in_ready: list = field(default_factory=list)
    out_to_hbm: list = field(default_factory=list)
    out_ready: list = field(default_factory=list)

    def __post_init__(self) -> None:
        n_in, n_out = len(self.record.inputs), len(self.record.outputs)
        self.in_ready = list(self.in_ready) + [None] * (n_in - len(self.in_ready))
        self.out_to_hbm = list(self.out_to_hbm) + [True] * (n_out - len(self.out_to_hbm))
        self.out_ready = [None] * n_out

    @property
    def inputs(self) -> tuple[TensorDesc, ...]:
        return self.record.inputs

    @property
    def outputs(self) -> tuple[TensorDesc, ...]:
        return self.record.outputs

    @property
    def attrs(self) -> dict:
        return self.record.attrs

    def in_sbuf(self, i: int) -> bool:
        return i < len(self.in_ready) and self.in_ready[i] is not None

    def ready_deps(self, i: int, group: int | None = None, groups: int | None = None) -> tuple:
        """Deps that make input i available for tile group ``group`` of ``groups``."""
        ready = self.in_ready[i] if i < len(self.in_ready) else None
        if not ready:
            return ()
        if group is not None and groups == len(ready):
            return (ready[group],)
        return (ready[-1],)

    def set_ready(self, k: int, ids) -> None:
        if k < len(self.out_ready):
            self.out_ready[k] = tuple(ids)


Emitter = Callable[[OpContext], None]       # emits instructions (a lowering, or one candidate mapping) into a context
