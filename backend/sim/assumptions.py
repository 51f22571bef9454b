"""The registry of modelling constants that move simulated time but are not hardware facts.

Hardware facts live in the presets (``backend.sim.spec``: each field cites its source or is an
``ASSUMPTION`` with a plausible range). What is left are choices of the cost model itself: how a
GEMM is blocked, how large a streamed tile is, how many groups a pipeline is emitted in, what
share of the access overhead a back-to-back matmul pays. Each is registered here once with its
unit, its value, the (low, high) range a reasonable engineer would accept and why, or with a
citation when it is a published figure. The lowering and the cost formulas read the current value
with :func:`value` at call time, so :func:`overridden` can move one for a sensitivity pass
(``backend.sim.sensitivity``) without touching the modules; planners that cache decisions wrap
their caches with :func:`cached` (or register a clear with :func:`on_change`) so an override never
serves a stale plan.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from backend.sim.spec import ASSUMPTION, check_plausible

__all__ = ["Assumption", "ASSUMPTIONS", "value", "overridden", "registered", "on_change", "cached",
           "table"]


@dataclass(frozen=True)
class Assumption:
    """One named modelling constant: ``value`` in ``unit``; ``plausible`` is None only when
    ``source`` cites a published figure."""

    name: str
    value: float
    unit: str
    source: str
    why: str
    plausible: tuple[float, float] | None = None
    integer: bool = False           # counts and sizes: range ends are rounded to whole numbers

    def __post_init__(self) -> None:
        check_plausible(f"assumption {self.name!r}", self.value, self.source, self.plausible)

    @property
    def is_assumption(self) -> bool:
        return self.source.startswith(ASSUMPTION)


ASSUMPTIONS: dict[str, Assumption] = {}
_overrides: dict[str, float] = {}
_listeners: list[Callable[[], None]] = []


def _register(name: str, value: float, unit: str, why: str, *, plausible: tuple[float, float] | None = None,
              source: str = ASSUMPTION, integer: bool = False) -> None:
    if name in ASSUMPTIONS:
        raise ValueError(f"duplicate assumption {name!r}")
    ASSUMPTIONS[name] = Assumption(name, value, unit, source, why, plausible, integer)


ISA = "NKI ISA docstrings (general/nki/api/nki/isa/__init__.py, Sep 2025)"

# -- GEMM blocking on TensorE (backend/lowering/gemm.py) ------------------------------------------
_register("gemm.sbuf_budget_fraction", 0.9, "x usable SBUF", plausible=(0.75, 0.95),
          why="share of usable SBUF one GEMM's operand/output blocks may take; the rest holds bias, "
              "scratch and the next op's tiles. Sets the block sizes, hence HBM re-reads.")
_register("gemm.max_block_groups", 16, "groups", plausible=(8, 32), integer=True,
          why="blocks are emitted in at most this many groups with repeat counts (bounds simulator "
              "cost); fewer groups lengthen pipeline fill and drain, as a coarser software pipeline would")
_register("gemm.max_k_steps", 8, "steps", plausible=(4, 16), integer=True,
          why="K blocks per output block emitted as separate, double-buffered steps")
_register("gemm.max_psum_groups_per_step", 8, "groups", plausible=(4, 16), integer=True,
          why="PSUM groups per K step emitted separately, so evacuation overlaps the next group's matmuls")
_register("gemm.psum_tiles_per_group", 4, "tiles", plausible=(2, 4), integer=True,
          why="output tiles accumulated per PSUM group; two groups in flight fill the 8 banks, so 4 is "
              "the most that fits and 2 a more conservative compiler")
_register("gemm.simulated_plans", 4, "plans per estimate", plausible=(1, 8), integer=True,
          why="blocking plans the planner times by simulation, the best this many by each of its two "
              "closed-form estimates (pipelined, roofline), as an autotuner times a few variants; 1 "
              "trusts the estimates, more finds the fastest plan more often at more planning cost")

# -- streamed tile pipelines (backend/lowering/stream.py, kernel.py, attention.py) ---------------
_register("stream.tile_bytes_per_partition", 8 * 1024, "B", plausible=(4 * 1024, 16 * 1024), integer=True,
          why="bytes per partition of one operand tile: past the >= 4 KiB DMA knee (nki-dma-bandwidth-"
              "guide), small next to SBUF; compilers pick 4-16 KiB")
_register("stream.plane_bytes_per_partition", 32 * 1024, "B", plausible=(16 * 1024, 48 * 1024), integer=True,
          why="SBUF share per partition of a plane op's operands (double-buffered 64 KiB of ~190 KiB)")
_register("stream.max_groups", 8, "groups", plausible=(4, 16), integer=True,
          why="tile groups a stream is emitted in; the pipeline's fill and drain are one group each")
_register("kernel.resident_fraction", 0.5, "x usable SBUF", plausible=(0.25, 0.75),
          why="share of usable SBUF that a fused kernel's resident intermediates may take before the "
              "largest spill to HBM; the rest is the ops' working tiles")
_register("attention.head_groups", 8, "groups", plausible=(4, 16), integer=True,
          why="head groups of fused attention, software-pipelined by one stage; more groups overlap "
              "TensorE with the softmax engines better")
_register("attention.psum_buffers", 2, "buffers", plausible=(2, 4), integer=True,
          why="score and product tiles in flight per PSUM buffer: double buffering lets TensorE fill one "
              "while VectorE/ScalarE read the other (the pipelined lowering needs at least 2)")

# -- other lowering choices ----------------------------------------------------------------------
_register("data.min_dma_run_bytes", 512, "B", plausible=(256, 2048), integer=True,
          why="copies whose contiguous source runs are shorter go through SBUF and a TensorE "
              "transpose instead of one DMA descriptor per run (DMA is overhead-bound below ~256-512 B)")
_register("reductions.chunk_elems", 4096, "elements", plausible=(2048, 8192), integer=True,
          why="free elements per chunk of a row that does not fit SBUF")
_register("reductions.row_buffers", 4, "buffers", plausible=(3, 6), integer=True,
          why="row tiles in flight per partition (in, out, double-buffered) when deciding whether a row fits")
_register("sorting.segment_min", 512, "elements", plausible=(256, 2048), integer=True,
          why="smallest piece of a row worth its own partition in top-k")
_register("resample.coord_passes", 6, "passes", plausible=(4, 8), integer=True,
          why="VectorE passes to build interpolation coordinates (unnormalise, clip/reflect, floor, two "
              "weights, flat index)")
_register("conv.band_buffers", 2, "buffers", plausible=(2, 3), integer=True,
          why="band buffers per operand of a VectorE conv: the next band loads while this one computes")

# -- instruction costs (backend/sim/costs) -------------------------------------------------------
_register("dma.issue_ns", 600.0, "ns per DMA instruction", plausible=(0.0, 900.0),
          why="descriptor generation per DMA instruction on targets with hardware DGE (~600 ns per "
              "hardware-DGE instruction on NC-v3: shared/hardware.md after nki-dge; the figure itself "
              "was not found in the stored docs, hence a range). A queue issues one instruction at a "
              "time while earlier transfers move; a lone transfer hides it inside the ~1.3 us start "
              "latency. 0: the compiler precomputes every static descriptor (dge_mode none)")
_register("dma.issue_queues", 2, "queues", plausible=(1, 4), integer=True,
          why="instruction streams issuing DMAs at once (nki.isa.dma_copy: hardware DGE is invoked by "
              "the Sync or Scalar engine sequencers); each issues its DMA instructions in order")
_register("dma.queue_transfer_ns", 1300.0, "ns per transfer", plausible=(850.0, 1300.0),
          why="least time between the starts of two transfers in one DMA queue. A queue runs its transfers "
              "in order (nki-dma-overview, DMA Queues) and every transfer pays descriptor setup, "
              "synchronization and the ~1300 ns semaphore-to-start latency, so with small payloads the "
              "transfer rate, not bandwidth, limits (nki-dma-bandwidth-guide). The overview's figure of "
              "throughput against bytes per partition (p=128, one transfer shape repeated) doubles with "
              "every doubling from 32 B to 2 KiB a partition and flattens from 4 KiB: a constant time per "
              "transfer, about 1.2x what 2 KiB a partition takes at the full rate (0.9-1.2 us at 23-17 B/ns "
              "an engine; the axis has no scale). Only transfers whose queue the program names pay it")
_register("tensor.matmul_access_overhead_share", 1.0, "x access overhead", plausible=(0.0, 1.0),
          why="share of the ~60-cycle static access overhead charged to each nc_matmul. The ISA "
              "figure is already the average of back-to-back matmuls, so the overhead may be counted "
              "twice (0) or be real per instruction (1)")
_register("tensor.matmul_min_stationary_cycles", 64, "cycles", source=ISA + " nc_matmul: max(min(64, N_stationary), N_moving)",
          why="a matmul streams at least min(64, stationary free size) cycles")
_register("gpsimd.start_cycles", 150, "cycles", source=ISA + " iota / affine_select: 150 + N",
          why="fixed start cost of a GpSimdE software loop; gathers and scatter-adds are assumed to pay "
              "the same (no published figure)")


def value(name: str) -> float:
    """The current value of assumption ``name`` (its default unless a sensitivity pass moved it)."""
    try:
        return _overrides[name] if name in _overrides else ASSUMPTIONS[name].value
    except KeyError:
        raise KeyError(f"unknown assumption {name!r}; known: {', '.join(sorted(ASSUMPTIONS))}") from None


def overrides() -> tuple[tuple[str, float], ...]:
    """The assumptions moved from their defaults right now, sorted (a cache key for results that
    depend on them)."""
    return tuple(sorted(_overrides.items()))


def registered() -> tuple[Assumption, ...]:
    return tuple(ASSUMPTIONS.values())


def on_change(clear: Callable[[], None]) -> Callable[[], None]:
    """Call ``clear()`` whenever an override starts or ends (a planner's cache of decisions)."""
    _listeners.append(clear)
    return clear


def cached(maxsize: int = 4096) -> Callable:
    """``functools.lru_cache`` that is cleared whenever an assumption's value changes."""
    def wrap(fn: Callable) -> Callable:
        memo = lru_cache(maxsize=maxsize)(fn)
        on_change(memo.cache_clear)
        return memo
    return wrap


def _changed() -> None:
    for clear in _listeners:
        clear()


@contextlib.contextmanager
def overridden(values: dict[str, float] | None = None, **more: float) -> Iterator[None]:
    """Run a block with some assumptions moved (names with dots go in ``values``)."""
    changes = {**(values or {}), **more}
    for name, v in changes.items():
        spec = ASSUMPTIONS.get(name)
        if spec is None:
            raise KeyError(f"unknown assumption {name!r}; known: {', '.join(sorted(ASSUMPTIONS))}")
        if spec.integer and v != int(v):
            raise ValueError(f"assumption {name!r} is a whole number, got {v}")
    saved = dict(_overrides)
    _overrides.update({k: (int(v) if ASSUMPTIONS[k].integer else v) for k, v in changes.items()})
    _changed()
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
        _changed()


def table() -> str:
    """A plain-text table: name, value (current), unit, plausible range or source."""
    rows = []
    for a in ASSUMPTIONS.values():
        where = f"{a.plausible[0]:g} .. {a.plausible[1]:g}" if a.plausible else a.source
        rows.append((a.name, f"{value(a.name):g}", a.unit, where))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{n:<{widths[0]}}  {v:>{widths[1]}}  {u:<{widths[2]}}  {w}" for n, v, u, w in rows)
