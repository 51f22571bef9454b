"""Shape-dependent time of tiled matrix-unit kernels (GEMM, implicit-GEMM conv, attention).

A GEMM kernel splits C[M, N] (per batch) into CTA tiles of tile_m x tile_n; each CTA runs a
K loop of tile_k steps. The formulas, all exact:

    tile_m'  = min(tile_m, roundup(M, MMA_GRANULE_ELEMS))     (same for N: small problems get
                                                               narrower tiles, as cuBLAS picks)
    tiles    = batch * ceil(M / tile_m') * ceil(N / tile_n')
    k_iters  = ceil(K / tile_k),  tile_k = tile_k_bytes / itemsize
    ctas     = tiles * split_k;   iters_per_cta = ceil(k_iters / split_k)
    waves    = ceil(ctas / sm_count)                            (wave quantisation)
    iter_ns  = work_scale * 2 * tile_m' * tile_n' * tile_k / (peak / sm_count * max_eff)
    ramp_ns  = hbm_latency_ns                                   (K-loop pipeline fill: the
                                                               first stage must arrive from HBM
                                                               before the first MMA)
    compute_ns = waves * (ramp_ns + iters_per_cta * iter_ns)

Padding (M, N, K rounded up to the tile), the partly empty last wave and the ramp are why small,
skinny and odd-sized GEMMs fall short of peak. ``work_scale`` is FLOPs per GEMM-equivalent FLOP
of the shape (2 for attention's two products); it is 1 for plain GEMMs.

Split-K: when the output has fewer tiles than SMs, K is cut into ``split_k`` slices so more SMs
work; each slice writes an fp32 partial tile that a reduction reads back. The partials,
split_k * batch * M * N * 4 bytes, stay in L2 when they fit in ``l2_bytes`` (they are read
back at once); otherwise they cost 2x their size in extra HBM traffic. L2 bandwidth itself is
not modelled. ``split_k`` ranges over 1..min(k_iters, sm_count // tiles) and the one with the
least ``max(compute_ns, hbm_time_ns(bytes + extra))`` wins (ties: the smaller).
Since every CTA does a whole padded tile at max_eff, compute_ns >= flops / (peak * max_eff).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from backend.sim.gpu.presets import GpuConfig

__all__ = ["GemmShape", "GemmPlan", "plan_gemm", "hbm_time_ns", "MMA_GRANULE_ELEMS",
           "SPLIT_K_PARTIAL_BYTES"]

# Smallest CTA tile edge: Hopper's wgmma is m64nNk16 per warpgroup, and Ampere kernels tile in
# 64s too, so a tile never narrows below 64.
MMA_GRANULE_ELEMS = 64
# Split-K partial tiles accumulate in fp32.
SPLIT_K_PARTIAL_BYTES = 4


@dataclass(frozen=True, slots=True)
class GemmShape:
    """``batch`` independent ``[M, K] @ [K, N]`` products."""

    m: int
    n: int
    k: int
    batch: int = 1

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k, self.batch) < 1:
            raise ValueError(f"GEMM dimensions must be >= 1, got {self}")

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """The tiling the model chose and what it costs (see the module docstring)."""

    tile_m: int
    tile_n: int
    tile_k: int
    sm_count: int
    tiles: int
    split_k: int
    ctas: int
    waves: int
    iters_per_cta: int
    iter_ns: float
    ramp_ns: float
    compute_ns: float
    memory_ns: float
    extra_hbm_bytes: int

    @property
    def wave_efficiency(self) -> float:
        """Share of SM slots in the launched waves that hold a CTA."""
        return self.ctas / (self.waves * self.sm_count)

    @property
    def time_ns(self) -> float:
        """Kernel time without launch overhead: compute and HBM traffic overlap."""
        return max(self.compute_ns, self.memory_ns)


def hbm_time_ns(config: GpuConfig, nbytes: int) -> float:
    """Time to stream ``nbytes`` through HBM: first-byte latency plus bytes at max_hbm_eff.

    The latency term is what keeps small transfers far below peak bandwidth.
    """
    if nbytes <= 0:
        return 0.0
    return config.hbm_latency_ns + nbytes / (config.hbm_bytes_per_s * config.max_hbm_efficiency) * 1e9


def _tile_edge(dim: int, tile: int) -> int:
    return min(tile, ceil(dim / MMA_GRANULE_ELEMS) * MMA_GRANULE_ELEMS)


def plan_gemm(config: GpuConfig, shape: GemmShape, peak_flops_per_s: float, itemsize: int,
              hbm_bytes: int, work_scale: float = 1.0) -> GemmPlan:
    """Choose split-K and return the tiled kernel's compute and memory time.

    ``peak_flops_per_s`` is the whole-chip peak of the unit that runs the MMAs (tensor cores at
    the dtype's rate, or CUDA cores); ``hbm_bytes`` is the kernel's HBM traffic without split-K.
    """
    if work_scale < 1.0:
        raise ValueError(f"work_scale is FLOPs per GEMM-equivalent FLOP, >= 1; got {work_scale}")
    tile_m = _tile_edge(shape.m, config.tile_m)
    tile_n = _tile_edge(shape.n, config.tile_n)
    tile_k = max(1, config.tile_k_bytes // itemsize)
    tiles = shape.batch * ceil(shape.m / tile_m) * ceil(shape.n / tile_n)
    k_iters = ceil(shape.k / tile_k)
    per_sm_flops_per_ns = peak_flops_per_s / config.sm_count * config.max_compute_efficiency * 1e-9
    iter_ns = work_scale * 2 * tile_m * tile_n * tile_k / per_sm_flops_per_ns
    ramp_ns = config.hbm_latency_ns


    def plan(split_k: int) -> GemmPlan:
        ctas = tiles * split_k
        waves = ceil(ctas / config.sm_count)
        iters = ceil(k_iters / split_k)
        partial_bytes = split_k * shape.batch * shape.m * shape.n * SPLIT_K_PARTIAL_BYTES
        extra = 0 if split_k == 1 or partial_bytes <= config.l2_bytes else 2 * partial_bytes
        return GemmPlan(tile_m, tile_n, tile_k, config.sm_count, tiles, split_k, ctas, waves,
                        iters, iter_ns, ramp_ns, waves * (ramp_ns + iters * iter_ns),
                        hbm_time_ns(config, hbm_bytes + extra), extra)

    best = plan(1)
    for split_k in range(2, min(k_iters, config.sm_count // tiles) + 1):
        candidate = plan(split_k)
        if candidate.time_ns < best.time_ns:
            best = candidate
    return best
