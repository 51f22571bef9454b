"""Kernel-level fidelity cases: the NKI matmul tutorial's four kernels, run from their source, and one DMA.

The tutorial computes ``lhsT[K, M].T @ rhs[K, N]`` in bf16 with M, K, N = 4096, 8192, 8192 on
one trn1 core. Each kernel runs as published (``nki_tutorials.matmul``, NKI Beta 1) through the
NKI front end (``backend.nki``): every ``nl.load`` / ``nc_matmul`` / ``nl.copy`` / ``nl.store``
is one instruction, its dependencies those of the data it touches.

Whether a tile load may start before the previous iteration's matmuls finish depends on how many
buffers the NKI compiler gives a tile declared inside a loop, which the tutorial does not say;
the simpler kernels are therefore bracketed by one buffer (serial) and two (prefetch). The fully
optimised kernel runs with two. Each kernel's outer loop repeats identical iterations, so one is
traced (the kernel called on one iteration's slice of the operands: the same loop body) and the
time multiplied by the iterations; traced programs are kept per target and spread over a what-if's
DMA engines (``backend.nki.kernel.on_target``), so error bands re-simulate without re-tracing.
"""
from __future__ import annotations

from collections import Counter

from backend.lowering.builder import Builder
from backend.nki import TensorSpec, run_kernel
from backend.nki.kernel import on_target
from backend.sim import Program, Simulator, get_target
from backend.sim.presets import NeuronConfig
from benchmarks.fidelity.nki_tutorials import matmul as tutorial

__all__ = ["MATMUL_SHAPE", "matmul_program", "matmul_ns", "tutorial_variant_ns", "tutorial_variant_hbm_bytes",
           "busiest_queue_transfers", "TUTORIAL_VARIANTS", "OPTIMISED_BLOCKS", "optimised_hbm_bytes", "dma_program", "dma_ns",
           "variant_program"]

MATMUL_SHAPE = (4096, 8192, 8192)          # M, K, N
_TILE_M, _TILE_N = 128, 512

# Variant -> (kernel, the M and N of one outer-loop iteration: the slice each iteration computes).
TUTORIAL_VARIANTS = {
    "naive tiled": (tutorial.nki_matmul_tiled_, _TILE_M, _TILE_N),             # per output tile
    "hoisted loads": (tutorial.nki_matmul_hoist_load_, _TILE_M, None),          # per M tile, all N
    "M/N blocking": (tutorial.nki_matmul_block_free_dimension_, 2 * _TILE_M, None),   # per 2-tile M block
}
# nki_matmul_fully_optimized_'s default meta-parameters: tiles per block in M, N and K.
OPTIMISED_BLOCKS = (16, 2, 8)
_OPTIMISED = (tutorial.nki_matmul_fully_optimized_, None, OPTIMISED_BLOCKS[1] * _TILE_N)   # per N block

_TRACED: dict = {}


def variant_program(variant: str, target: NeuronConfig, prefetch: bool = True) -> tuple[Program, int]:
    """One outer-loop iteration of a tutorial kernel as traced from its source, and how many
    iterations the whole kernel runs. ``variant`` is a ``TUTORIAL_VARIANTS`` name or "fully
    optimised"; ``prefetch``: two buffers per loop tile, else one."""
    fn, m, n = _OPTIMISED if variant == "fully optimised" else TUTORIAL_VARIANTS[variant]
    buffers = 2 if prefetch else 1
    key = (variant, buffers, target.name)
    if key not in _TRACED:
        big_m, k, big_n = MATMUL_SHAPE
        m, n = m or big_m, n or big_n
        operands = (TensorSpec((k, m), "bfloat16", within=(k, big_m)), TensorSpec((k, n), "bfloat16", within=(k, big_n)))
        run = run_kernel(fn.fn, operands, target=target,
                         buffers=buffers, name=variant.replace(" ", "_").replace("/", ""))
        _TRACED[key] = (run.program, (big_m // m) * (big_n // n))
    program, repeats = _TRACED[key]
    return on_target(program, target), repeats


def _kernel_ns(variant: str, target: NeuronConfig, prefetch: bool) -> float:
    program, repeats = variant_program(variant, target, prefetch)
    return Simulator(target).run(program).total_time_ns * repeats


def _hbm_bytes(variant: str, target: NeuronConfig) -> int:
    program, repeats = variant_program(variant, target, True)
    return repeats * sum(ins.traffic.get("hbm_read_bytes", 0) + ins.traffic.get("hbm_write_bytes", 0)
                         for ins in program.instructions if ins.traffic)


def tutorial_variant_ns(variant: str, target: NeuronConfig, prefetch: bool) -> float:
    """Predicted ns of one of the tutorial's simpler kernels (one buffer per loop tile, or two with ``prefetch``)."""
    return _kernel_ns(variant, target, prefetch)


def tutorial_variant_hbm_bytes(variant: str, target: NeuronConfig) -> int:
    """HBM bytes a simpler kernel reads and writes over the whole run (its loads and stores)."""
    return _hbm_bytes(variant, target)


def busiest_queue_transfers(variant: str, target: NeuronConfig) -> int:
    """Transfers the kernel's busiest DMA queue (its busiest ``nl.load`` / ``nl.store`` call site)
    runs over the whole kernel: they run in order, so its time is at least that many transfer times."""
    program, repeats = variant_program(variant, target)
    counts = Counter()
    for ins in program.instructions:
        if ins.engine == "dma":
            counts[ins.dma_queue] += ins.repeat
    return repeats * max(counts.values())


def matmul_program(target: NeuronConfig) -> Program:
    """One N block of the fully optimised kernel (two buffers per loop tile)."""
    return variant_program("fully optimised", target)[0]


def matmul_ns(target: NeuronConfig) -> float:
    """Predicted ns of the fully optimised kernel: its N blocks are independent iterations."""
    return _kernel_ns("fully optimised", target, True)


def optimised_hbm_bytes(target: NeuronConfig | None = None) -> int:
    """HBM bytes of the fully optimised kernel as written: per N block and K block, the rhs block
    once and the lhsT block once per M block; the result stored once."""
    return _hbm_bytes("fully optimised", target or get_target("trn1"))


def dma_program(target: NeuronConfig) -> Program:
    """32 KiB HBM->SBUF on one DMA engine: 4 partitions x 4096 bf16 (nki-dma-overview)."""
    program = Program("dma_32KiB", "kernel")
    Builder(program, target).dma(32 * 1024, src="hbm", dst="sbuf", partitions=4, row_bytes=8192)
    return program


def dma_ns(target: NeuronConfig) -> float:
    """The engine's busy time (the profile's transfer bar); the ~1.3 us start latency comes before it."""
    (event,) = Simulator(target).run(dma_program(target)).events
    return event.duration_ns


def dma_with_latency_ns(target: str = "trn2") -> float:
    return Simulator(get_target(target)).run(dma_program(get_target(target))).total_time_ns
