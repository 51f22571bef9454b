"""Kernel-level fidelity cases: the NKI matmul tutorial's four variants and one DMA.

The tutorial computes ``lhsT[K, M].T @ rhs[K, N]`` in bf16 with M, K, N = 4096, 8192, 8192 on
one trn1 core. The fully optimised variant goes through the eager ``aten::mm`` lowering, fed the
tutorial's layout (the left operand stored transposed): its blocked plan keeps SBUF-resident
stationary/moving blocks, so DMA hides under TensorE. The three simpler variants are written
out here as the tutorial's loops, one ``dma_copy`` per tile, from the same instructions:

- naive tiled: per output tile [128, 512], per K step, load both tiles then matmul;
- hoisted loads: per M tile, load its whole lhsT column once; per N tile, load the rhs column;
- M/N blocking: lhsT blocks of 2 M tiles, rhs blocks of 2 N tiles, 4 output tiles per block pair.

Whether a tile load may start before the previous step's matmuls finish depends on how many
buffers the NKI compiler gives a tile allocated inside the loop, which the tutorial does not
say; each variant is therefore bracketed by one buffer (serial) and two (prefetch). One
repetition of the outer loop is simulated and multiplied by the repetitions.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.lowering import lower
from backend.lowering.builder import Builder
from backend.sim import OpRecord, Program, Simulator, TensorDesc, get_target
from backend.sim.presets import NeuronConfig

__all__ = ["MATMUL_SHAPE", "matmul_program", "matmul_ns", "tutorial_variant_ns", "tutorial_variant_hbm_bytes",
           "TUTORIAL_VARIANTS", "OPTIMISED_BLOCKS", "optimised_hbm_bytes", "dma_program", "dma_ns"]

MATMUL_SHAPE = (4096, 8192, 8192)          # M, K, N
_TILE_K, _TILE_M, _TILE_N = 128, 128, 512
_BF16 = 2


def matmul_program(target: NeuronConfig) -> Program:
    """The optimised tutorial GEMM as the eager lowering plans it (kernel timing: no launch)."""
    m, k, n = MATMUL_SHAPE
    lhs = TensorDesc((m, k), "bfloat16", (1, m))          # lhsT[K, M] seen as A[M, K]
    record = OpRecord(0, "aten::mm", (lhs, TensorDesc((k, n), "bfloat16")), (TensorDesc((m, n), "bfloat16"),))
    program = lower(record, target)
    program.info.launch_overhead_ns = 0.0
    return program


def matmul_ns(target: NeuronConfig) -> float:
    return Simulator(target).run(matmul_program(target)).total_time_ns


def _evacuate_and_store(b: Builder, mm: int, tiles: int) -> None:
    ev = b.compute("vector", "tensor_copy", free_size=_TILE_N, dtype="float32", out_dtype="bfloat16", src="psum",
                   deps=(mm,), repeat=tiles)
    b.dma(_TILE_M * _TILE_N * _BF16, src="sbuf", dst="hbm", row_bytes=_TILE_N * _BF16, deps=(ev,), repeat=tiles)


def _tiles(b: Builder, count: int, free: int, deps=()) -> tuple[int, ...]:
    """``count`` tiles [128 K, free] of bf16, one transfer each as the tutorial's loops issue them
    (one ``nl.load`` per tile)."""
    return tuple(b.dma(_TILE_K * free * _BF16, src="hbm", dst="sbuf", row_bytes=free * _BF16, deps=deps)
                 for _ in range(count))


def _lhs_tiles(b: Builder, count: int, deps=()) -> tuple[int, ...]:
    """``count`` lhsT tiles [128 K, 128 M]: rows of 128 bf16 (256 B)."""
    return _tiles(b, count, _TILE_M, deps)


def _rhs_tiles(b: Builder, count: int, deps=()) -> tuple[int, ...]:
    """``count`` rhs tiles [128 K, 512 N]: rows of 512 bf16 (1 KiB)."""
    return _tiles(b, count, _TILE_N, deps)


def _naive(b: Builder, prefetch: bool) -> int:
    """One output tile: 64 K steps of (load lhsT tile, load rhs tile, matmul). Repeats: 512 tiles."""
    m, k, n = MATMUL_SHAPE
    mms: list[int] = []
    for _ in range(k // _TILE_K):
        wait = mms[-2:-1] if prefetch else mms[-1:]
        loads = _lhs_tiles(b, 1, wait) + _rhs_tiles(b, 1, wait)
        mms.append(b.matmul(k=_TILE_K, m=_TILE_M, n=_TILE_N, dtype="bfloat16", deps=loads))
    _evacuate_and_store(b, mms[-1], 1)
    return (m // _TILE_M) * (n // _TILE_N)


def _blocked(b: Builder, prefetch: bool, tiles_m: int, tiles_n: int) -> int:
    """One M block: its lhsT tiles once, then per N block the rhs tiles and the block's matmuls."""
    m, k, n = MATMUL_SHAPE
    k_tiles = k // _TILE_K
    lhs = _lhs_tiles(b, tiles_m * k_tiles)
    mms: list[int] = []
    for _ in range(n // (_TILE_N * tiles_n)):
        wait = mms[-2:-1] if prefetch else mms[-1:]
        rhs = _rhs_tiles(b, tiles_n * k_tiles, wait)
        mms.append(b.matmul(k=_TILE_K, m=_TILE_M, n=_TILE_N, dtype="bfloat16", deps=lhs + rhs,
                            repeat=tiles_m * tiles_n * k_tiles))
        _evacuate_and_store(b, mms[-1], tiles_m * tiles_n)
    return m // (_TILE_M * tiles_m)


TUTORIAL_VARIANTS: dict[str, Callable[[Builder, bool], int]] = {
    "naive tiled": _naive,
    "hoisted loads": lambda b, prefetch: _blocked(b, prefetch, 1, 1),
    "M/N blocking": lambda b, prefetch: _blocked(b, prefetch, 2, 2),
}


def _variant_program(variant: str, target: NeuronConfig, prefetch: bool) -> tuple[Program, int]:
    """One repetition of a simpler loop as instructions, and how many repetitions the kernel runs."""
    program = Program(variant.replace(" ", "_"), "kernel")
    return program, TUTORIAL_VARIANTS[variant](Builder(program, target), prefetch)


def tutorial_variant_ns(variant: str, target: NeuronConfig, prefetch: bool) -> float:
    """Predicted ns of one of the tutorial's simpler loops (one buffer, or two with ``prefetch``)."""
    program, repeats = _variant_program(variant, target, prefetch)
    return Simulator(target).run(program).total_time_ns * repeats


def tutorial_variant_hbm_bytes(variant: str, target: NeuronConfig) -> int:
    """HBM bytes a simpler loop reads and writes over the whole kernel (its loads and stores)."""
    program, repeats = _variant_program(variant, target, False)
    return repeats * sum(ins.traffic.get("hbm_read_bytes", 0) + ins.traffic.get("hbm_write_bytes", 0)
                         for ins in program.instructions if ins.traffic)


# nki_matmul_fully_optimized_'s default meta-parameters: tiles per block in M, N and K.
OPTIMISED_BLOCKS = (16, 2, 8)


def optimised_hbm_bytes() -> int:
    """HBM bytes of the tutorial's fully optimised kernel as written (its blocking, not this
    simulator's lowering): per N block and K block, the rhs block once and the lhsT block once per
    M block; the result stored once."""
    m, k, n = MATMUL_SHAPE
    block_m, block_n, block_k = (t * s for t, s in zip(OPTIMISED_BLOCKS, (_TILE_M, _TILE_N, _TILE_K)))
    per_k_block = block_k * block_n + (m // block_m) * block_k * block_m
    return ((n // block_n) * (k // block_k) * per_k_block + m * n) * _BF16


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
