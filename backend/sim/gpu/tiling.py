"""Shape-dependent time of tiled matrix-unit kernels (GEMM, implicit-GEMM conv, attention).

A GEMM kernel splits C[M, N] (per batch) into CTA tiles of tile_m x tile_n; each CTA runs a
K loop of tile_k steps. Like cuBLAS's heuristics, the model tries every (tile, split-K) plan
of ``config.tile_shapes`` and keeps the fastest. For one tile (tile_m, tile_n), all exact:

    tile_m'  = min(tile_m, roundup(M, MMA_GRANULE_ELEMS))     (same for N: small problems get
                                                               narrower tiles)
    tiles    = batch * ceil(M / tile_m') * ceil(N / tile_n')
    k_iters  = ceil(K / tile_k),  tile_k = tile_k_bytes / itemsize
    ctas     = tiles * split_k;   iters_per_cta = ceil(k_iters / split_k)
    waves    = ceil(ctas / sm_count)                            (wave quantisation)
    mma_ns   = work_scale * 2 * tile_m' * tile_n' * tile_k / (peak / sm_count * max_eff)
    feed_ns  = (tile_m' + tile_n') * tile_k * itemsize / (l2_bytes_per_s / sm_count)
    iter_ns  = max(mma_ns, feed_ns)                             (operands stream from L2 while
                                                               the MMAs run; small tiles reuse
                                                               each byte less and starve)
    ramp_ns  = hbm_latency_ns                                   (K-loop pipeline fill: the
                                                               first stage must arrive from HBM
                                                               before the first MMA)
    reduce_ns = partial_time_ns(2 * partials) if split_k > 1   (split-K partials written, then
                                                               read back and summed)
    compute_ns = waves * (ramp_ns + iters_per_cta * iter_ns) + reduce_ns

Padding (M, N, K rounded up to the tile), the partly empty last wave and the ramp are why small,
skinny and odd-sized GEMMs fall short of peak; the L2 feed is why large tiles win on big ones.
``work_scale`` is FLOPs per GEMM-equivalent FLOP of the shape (2 for attention's two
products); it is 1 for plain GEMMs.

Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense
Matrix-Matrix Multiplication on the GPU", PPoPP 2023; CUTLASS's sm80 and sm90 stream-K
schedulers): when the last wave would be partly empty, that wave's r = tiles mod sm_count
tiles and one full wave before them are shared out over all SMs by K iterations (the paper's
"data-parallel + two-tile stream-K" hybrid), so every SM gets at least one tile's K loop and a
tile is split between at most two SMs:

    dp_waves = tiles // sm_count - 1                            (plain data-parallel waves)
    sk_iters = ceil((r + sm_count) * k_iters / sm_count)        (each SM's share of the rest)
    fixup_ns = 2 * tile_m' * tile_n' * 4 / (l2_bytes_per_s / sm_count)
                                                               (an fp32 partial tile written by
                                                               one SM, read back by the owner;
                                                               charged even where the shares
                                                               happen to end on tile edges, so
                                                               time never drops as a dim grows)
    compute_ns = dp_waves * (ramp_ns + k_iters * iter_ns) + ramp_ns + sk_iters * iter_ns + fixup_ns

Its partials, at most one per SM (sm_count * tile_m' * tile_n' * 4 bytes), follow split-K's
L2 rule.

Split-K: when the output has fewer tiles than SMs, K is cut into ``split_k`` slices so more SMs
work; each slice writes an fp32 partial tile that a reduction reads back. The partials,
split_k * batch * M * N * 4 bytes, stay in L2 when they fit in ``l2_bytes`` (they are read
back at once); otherwise they cost 2x their size in extra HBM traffic. ``partial_time_ns``
streams partial traffic at L2 latency and bandwidth while they fit in L2, else from HBM. ``split_k`` ranges over
1..min(k_iters, sm_count // tiles). A plan's time is ``max(compute_ns, memory_time_ns(bytes +
extra))``; the least wins, ties going to the earlier tile and the smaller split.
Since every CTA does a whole padded tile at max_eff, compute_ns >= flops / (peak * max_eff).

Memory time (``memory_time_ns``): a kernel whose whole traffic fits in
``l2_resident_fraction`` of L2 is served from L2 (latency ``l2_latency_ns``, rate
``l2_bytes_per_s``): in an eager stream a small kernel reads what its predecessors just wrote,
and its writes land in the write-back L2. Larger traffic streams from HBM. A fused kernel's
traffic is split per record into an L2 and an HBM share (``split_memory_time_ns``).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from backend.sim.gpu.presets import GpuConfig

__all__ = ["GemmShape", "GemmPlan", "plan_gemm", "hbm_time_ns", "l2_time_ns", "fits_in_l2",
           "memory_time_ns", "split_memory_time_ns", "MMA_GRANULE_ELEMS", "SPLIT_K_PARTIAL_BYTES"]

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
    stream_k: bool = False

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


def l2_time_ns(config: GpuConfig, nbytes: int) -> float:
    """Time to stream ``nbytes`` that are resident in L2: L2 latency plus bytes at L2 bandwidth."""
    if nbytes <= 0:
        return 0.0
    return config.l2_latency_ns + nbytes / config.l2_bytes_per_s * 1e9


def fits_in_l2(config: GpuConfig, nbytes: int) -> bool:
    """Whether a kernel moving ``nbytes`` in all is served from L2 (see the module docstring)."""
    return nbytes <= config.l2_bytes * config.l2_resident_fraction


def split_memory_time_ns(config: GpuConfig, l2_bytes: int, hbm_bytes: int) -> float:
    """Traffic served partly from L2, partly from HBM: the slower first byte, then both shares
    at their rates (one stream of loads, so the shares add up)."""
    if hbm_bytes > 0:
        return hbm_time_ns(config, hbm_bytes) + max(0, l2_bytes) / config.l2_bytes_per_s * 1e9
    return l2_time_ns(config, l2_bytes)


def memory_time_ns(config: GpuConfig, nbytes: int) -> float:
    """A kernel's memory time: from L2 when its traffic fits there, else from HBM."""
    return l2_time_ns(config, nbytes) if fits_in_l2(config, nbytes) else hbm_time_ns(config, nbytes)


def _tile_edge(dim: int, tile: int) -> int:
    return min(tile, ceil(dim / MMA_GRANULE_ELEMS) * MMA_GRANULE_ELEMS)


def _tile_plans(config: GpuConfig, shape: GemmShape, tile: tuple[int, int], per_sm_flops_per_ns: float,
                itemsize: int, hbm_bytes: int, work_scale: float):
    """Every split-K plan of one CTA tile."""
    tile_m = _tile_edge(shape.m, tile[0])
    tile_n = _tile_edge(shape.n, tile[1])
    tile_k = max(1, config.tile_k_bytes // itemsize)
    tiles = shape.batch * ceil(shape.m / tile_m) * ceil(shape.n / tile_n)
    k_iters = ceil(shape.k / tile_k)
    mma_ns = work_scale * 2 * tile_m * tile_n * tile_k / per_sm_flops_per_ns
    feed_ns = (tile_m + tile_n) * tile_k * itemsize / (config.l2_bytes_per_s / config.sm_count) * 1e9
    iter_ns = max(mma_ns, feed_ns)
    ramp_ns = config.hbm_latency_ns
    def partial_traffic(partial_bytes: int) -> int:
        return 0 if partial_bytes <= config.l2_bytes else 2 * partial_bytes

    def partial_time_ns(partial_bytes: int, traffic: int) -> float:
        in_l2 = partial_bytes <= config.l2_bytes
        return l2_time_ns(config, traffic) if in_l2 else hbm_time_ns(config, traffic)

    for split_k in range(1, max(1, min(k_iters, config.sm_count // tiles)) + 1):
        ctas = tiles * split_k
        waves = ceil(ctas / config.sm_count)
        iters = ceil(k_iters / split_k)
        partials = split_k * shape.batch * shape.m * shape.n * SPLIT_K_PARTIAL_BYTES
        extra = 0 if split_k == 1 else partial_traffic(partials)
        reduce_ns = 0.0 if split_k == 1 else partial_time_ns(partials, 2 * partials)
        yield GemmPlan(tile_m, tile_n, tile_k, config.sm_count, tiles, split_k, ctas, waves,
                       iters, iter_ns, ramp_ns, waves * (ramp_ns + iters * iter_ns) + reduce_ns,
                       memory_time_ns(config, hbm_bytes + extra), extra)
    full, rest = divmod(tiles, config.sm_count)
    if full and rest and k_iters > 1:
        sk_iters = ceil((rest + config.sm_count) * k_iters / config.sm_count)
        partial_tile = tile_m * tile_n * SPLIT_K_PARTIAL_BYTES
        fixup_ns = 2 * partial_tile / (config.l2_bytes_per_s / config.sm_count) * 1e9
        extra = partial_traffic(config.sm_count * partial_tile)
        compute_ns = ((full - 1) * (ramp_ns + k_iters * iter_ns) + ramp_ns + sk_iters * iter_ns
                      + fixup_ns)
        yield GemmPlan(tile_m, tile_n, tile_k, config.sm_count, tiles, 1,
                       (full + 1) * config.sm_count, full + 1, sk_iters, iter_ns, ramp_ns, compute_ns,
                       memory_time_ns(config, hbm_bytes + extra), extra, stream_k=True)


def plan_gemm(config: GpuConfig, shape: GemmShape, peak_flops_per_s: float, itemsize: int,
              hbm_bytes: int, work_scale: float = 1.0) -> GemmPlan:
    """Choose the tile and split-K and return the tiled kernel's compute and memory time.

    ``peak_flops_per_s`` is the whole-chip peak of the unit that runs the MMAs (tensor cores at
    the dtype's rate, or CUDA cores); ``hbm_bytes`` is the kernel's memory traffic without split-K.
    """
    if work_scale < 1.0:
        raise ValueError(f"work_scale is FLOPs per GEMM-equivalent FLOP, >= 1; got {work_scale}")
    per_sm_flops_per_ns = peak_flops_per_s / config.sm_count * config.max_compute_efficiency * 1e-9
    best = None
    for tile in config.tile_shapes:
        for candidate in _tile_plans(config, shape, tile, per_sm_flops_per_ns, itemsize, hbm_bytes,
                                     work_scale):
            if best is None or candidate.time_ns < best.time_ns:
                best = candidate
    return best
