"""The simulator's instruction IR: what runs where, how big it is, what it waits for.

An ``Instruction`` is one entry of an engine's in-order stream. ``repeat`` lets one entry
stand for that many identical back-to-back hardware instructions (a steady-state tile loop),
so big ops cost the simulator a bounded number of entries, not one per tile. Costs are not
stored here: ``backend.sim.costs`` derives them from the cost inputs and the target, so the
same Program can be re-simulated on a what-if target.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.sim.trace import OpSummary

__all__ = ["Instruction", "Program", "ENGINES", "COMPUTE_ENGINES", "LEVELS", "PROGRAM_KINDS"]

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
# "collective": the collectives lane (collective cores / DMA rings), costed from a topology.
ENGINES = (*COMPUTE_ENGINES, "dma", "host", "collective")
LEVELS = ("hbm", "sbuf", "psum", "host")
PROGRAM_KINDS = ("op", "kernel", "fallback", "transfer", "view")


@dataclass(slots=True)
class Instruction:
    """One stream entry; sizes are per hardware instruction, traffic and flops are totals.

    engine: "tensor" | "vector" | "scalar" | "gpsimd" | "dma" | "host" | "collective".
    opcode: NKI ISA name ("nc_matmul", "tensor_tensor", "activation", "dma_copy", ...).
    repeat: identical hardware instructions this entry stands for, run back to back.
    partitions / free_size: the tile, partition axis x elements per partition (N in the ISA).
    stationary_free: nc_matmul's stationary free size (M); free_size is the moving N.
    deps: indices of earlier instructions of the same Program this one waits for.
    nbytes / descriptors / dma_engines: DMA payload, contiguous chunks, and engines it spans.
    dma_queue: the DMA queue a transfer is submitted to, when the program says (an NKI kernel's
        call site); transfers of one queue run in order at the queue's transfer rate. None: the
        compiler spreads the program's transfers over queues, so no one queue paces them.
    duration_ns: explicit cost per hardware instruction (host compute, host link transfers).
    traffic: bytes read and written per memory level, keyed like the trace's counters
        (``"hbm_read_bytes"``, ``"sbuf_write_bytes"``, ...; see ``trace.TRAFFIC_FIELDS``).
    attrs: opcode-specific cost inputs (``alu``, ``psum_input``, ``strided``, ...).
    """

    engine: str
    opcode: str
    repeat: int = 1
    partitions: int = 128
    free_size: int = 0
    dtype: str = "float32"
    stationary_free: int = 0
    deps: tuple = ()
    nbytes: int = 0
    descriptors: int = 0
    dma_engines: int = 1
    src: str = "sbuf"
    dst: str = "sbuf"
    duration_ns: float | None = None
    flops: int = 0
    traffic: dict | None = None
    attrs: dict | None = None
    dma_queue: int | None = None

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default) if self.attrs else default


class Program:
    """Instructions of one eager op or one fused kernel, plus what the trace reports about it.

    ``info`` is the OpSummary the scheduler fills with timing: name, kind ("op", "kernel",
    "fallback", "transfer" or "view"), model FLOPs (for MFU), shapes, source, FX nodes, the
    on-chip footprint the lowering planned, spilled bytes and the launch overhead paid on the
    host before the program can start. ``sync``: the host waits for this program to finish
    (device->host reads, host fallbacks).
    """

    __slots__ = ("info", "instructions", "sync")

    def __init__(self, name: str, kind: str = "op", *, sync: bool = False, **info):
        if kind not in PROGRAM_KINDS:
            raise ValueError(f"unknown program kind {kind!r}; expected one of {PROGRAM_KINDS}")
        self.info = OpSummary(op_index=-1, name=name, kind=kind, **info)
        self.instructions: list[Instruction] = []
        self.sync = sync

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def kind(self) -> str:
        return self.info.kind

    def add(self, instr: Instruction) -> int:
        """Append an instruction; its deps must name earlier instructions. Returns its index."""
        index = len(self.instructions)
        if instr.engine not in ENGINES:
            raise ValueError(f"unknown engine {instr.engine!r}; expected one of {ENGINES}")
        if instr.repeat < 1:
            raise ValueError(f"{instr.opcode}: repeat must be >= 1, got {instr.repeat}")
        if instr.engine == "gpsimd" and "psum" in (instr.src, instr.dst):
            raise ValueError(f"{instr.opcode}: GpSimdE cannot access PSUM")
        for d in instr.deps:
            if not 0 <= d < index:
                raise ValueError(f"{instr.opcode}: dependency {d} is not an earlier instruction (index {index})")
        self.instructions.append(instr)
        return index

    @property
    def hardware_instruction_count(self) -> int:
        return sum(i.repeat for i in self.instructions)

    def __repr__(self) -> str:
        """``Program('aten::mm', op: tensor nc_matmul x64, dma dma_copy x12, ...; 2.1 MiB DMA)``:
        hardware instructions per engine and opcode, in first-use order."""
        counts: dict[tuple[str, str], int] = {}
        for instr in self.instructions:
            counts[instr.engine, instr.opcode] = counts.get((instr.engine, instr.opcode), 0) + instr.repeat
        body = ", ".join(f"{engine} {opcode} x{n}" for (engine, opcode), n in counts.items()) or "no instructions"
        moved = sum(i.nbytes for i in self.instructions if i.engine == "dma")
        dma = f"; {moved / 2**20:.3g} MiB DMA" if moved else ""
        return f"Program({self.name!r}, {self.kind}: {body}{dma})"
