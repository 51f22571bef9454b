"""The NKI fused-Mamba tutorial's kernels (``mamba_v1``/``v2``/``v3``) as instruction streams.

The tutorial (NKI docs, "Fused Mamba") publishes device latencies of its three kernels at four
shapes; each is written out here loop by loop, one instruction per NKI call, from the same cost
formulas and scheduler as every other row. Per (channel tile, state[, seq tile]) iteration:

- ScalarE ``activation(exp, delta_i, scale=A_i)`` (steps 1-2 folded, as the tutorial does);
- two partition broadcasts of a [1, seq] row (``B_i``, ``C_i``) on TensorE into PSUM: the
  tutorial's own mapping ("p-dim broadcast ... requires a separate instruction on TensorE");
- VectorE ``deltaU = delta_i * u_i`` (both SBUF, fp32: 2N), ``deltaBu = deltaU * B_bcast``
  and ``scanC = scan * C_bcast`` (one input in PSUM: N), ``tensor_tensor_scan`` (2N) and the
  ``scanC_accum += scanC`` accumulation (2N), costed by the ISA formulas in ``costs/vector.py``.

What the tutorial leaves to the compiler is bracketed, not chosen: in v2 and v3 ``deltaU`` does
not depend on the state, and its inputs are loaded outside the state loop, so the compiler may
hoist it (low end) or run it per state as written (high end). In v1 the inputs are reloaded
inside the loop (the tutorial's profile warns about the reloads), so there is nothing to hoist.
Loads carry no dependencies: every loop is ``affine_range`` (v3's seq loop is ``static_range``
with the scan carried through ``initial``), so tiles may be fetched ahead of their use.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.lowering.builder import Builder
from backend.sim import Program, Simulator
from backend.sim.presets import NeuronConfig

__all__ = ["MambaCase", "MAMBA_CASES", "mamba_kernel_program", "mamba_kernel_ns", "vector_active", "hbm_bytes"]

_FP32 = 4
_PARTITIONS = 128


@dataclass(frozen=True)
class MambaCase:
    """One published kernel latency: variant, shape (batch, seq, channels, state), time."""

    variant: str
    batch: int
    seq: int
    channels: int
    state: int
    published_ns: float
    vector_active: float        # the tutorial profile's VectorE active share of the execution period

    @property
    def label(self) -> str:
        return f"mamba_{self.variant} b{self.batch} s{self.seq} c{self.channels} n{self.state}"


# NKI "Fused Mamba" tutorial: mamba_v1 at the toy shape (172.93 us, also in shared/hardware.md),
# v1 and v2 at 4096 channels (2.34 ms, 1.61 ms), v3 at 4096 channels and seq 8192 (27.8 ms).
MAMBA_CASES = (
    MambaCase("v1", 1, 512, 256, 16, 172.93e3, 0.9871),
    MambaCase("v1", 1, 512, 4096, 16, 2.34e6, 0.9216),
    MambaCase("v2", 1, 512, 4096, 16, 1.61e6, 0.9963),
    MambaCase("v3", 1, 8192, 4096, 16, 27.8e6, 0.9485),
)


class _Kernel:
    """Emits the tutorial's NKI calls for one batch sample; ``seq_tile`` is v3's ``seq_len_fsize``."""

    def __init__(self, b: Builder, seq: int, hoist_delta_u: bool, seq_tile: int | None = None):
        self.b, self.seq, self.hoist = b, seq, hoist_delta_u
        self.tile = seq_tile or seq

    def load_rows(self, free: int, partitions: int = _PARTITIONS) -> int:
        """``nl.load`` of [partitions, free] fp32 with contiguous rows (delta, u, B, C slices)."""
        return self.b.dma(partitions * free * _FP32, src="hbm", dst="sbuf", partitions=partitions,
                          row_bytes=free * _FP32)

    def load_a(self) -> int:
        """``A[channels, i_state]``: one fp32 per partition, a 4 B run each."""
        return self.b.dma(_PARTITIONS * _FP32, src="hbm", dst="sbuf", partitions=_PARTITIONS, row_bytes=_FP32)

    def broadcast(self, row: int) -> int:
        """A [1, tile] row to [128, tile] on TensorE: ones[1, 128] stationary, the row moving."""
        return self.b.matmul(k=1, m=_PARTITIONS, n=self.tile, dtype="float32", deps=(row,))

    def vector(self, deps, *, fast_input: str = "", alu: str = "multiply") -> int:
        attrs = {"psum_input": True} if fast_input == "psum" else {}
        return self.b.compute("vector", "tensor_tensor", free_size=self.tile, n_inputs=2, deps=deps, alu=alu,
                              flops=_PARTITIONS * self.tile, **attrs)

    def delta_u(self, delta: int, u: int) -> int:
        return self.vector((delta, u))

    def step(self, delta: int, u: int, a: int, accum: int | None, carry: int | None, delta_u: int | None) -> int:
        """Steps 1-6 for one state on one [128, tile] tile; returns the accumulate (or scan if first)."""
        b = self.b
        delta_a = b.compute("scalar", "activation", free_size=self.tile, deps=(delta, a), func="exp")
        b_row, c_row = self.load_rows(self.tile, 1), self.load_rows(self.tile, 1)
        b_bcast = self.broadcast(b_row)
        du = delta_u if delta_u is not None else self.delta_u(delta, u)
        delta_bu = self.vector((du, b_bcast), fast_input="psum")
        scan = self.vector((delta_a, delta_bu) + ((carry,) if carry is not None else ()), alu="scan")
        self.last_scan = scan
        c_bcast = self.broadcast(c_row)
        scan_c = self.vector((scan, c_bcast), fast_input="psum")
        return self.vector((scan_c,) + ((accum,) if accum is not None else ()), alu="add")

    def store(self, deps) -> int:
        return self.b.dma(_PARTITIONS * self.seq * _FP32, src="sbuf", dst="hbm", partitions=_PARTITIONS,
                          row_bytes=self.seq * _FP32, deps=tuple(deps))

    def zeros(self) -> int:
        return self.b.compute("vector", "memset", free_size=self.seq, value=0)


def _v1(k: _Kernel, channel_tiles: int, state: int) -> None:
    """for state: for channel tile: load delta, A, u, B, C; steps 1-6 into scanC_accum[tile]."""
    accum = [k.zeros() for _ in range(channel_tiles)]
    for _ in range(state):
        for t in range(channel_tiles):
            delta, a, u = k.load_rows(k.seq), k.load_a(), k.load_rows(k.seq)
            accum[t] = k.step(delta, u, a, accum[t], None, None)
    for t in range(channel_tiles):
        k.store((accum[t],))


def _v2(k: _Kernel, channel_tiles: int, state: int) -> None:
    """for channel tile: load delta, u once; for state: load A, B, C; steps 1-6; store the tile."""
    for _ in range(channel_tiles):
        accum = k.zeros()
        delta, u = k.load_rows(k.seq), k.load_rows(k.seq)
        du = k.delta_u(delta, u) if k.hoist else None
        for _ in range(state):
            accum = k.step(delta, u, k.load_a(), accum, None, du)
        k.store((accum,))


def _v3(k: _Kernel, channel_tiles: int, state: int) -> None:
    """v2 with seq tiled by 512: per state, a static seq loop carrying the scan through ``initial``."""
    tiles = k.seq // k.tile
    for _ in range(channel_tiles):
        zero = k.zeros()
        accum = [zero] * tiles
        delta, u = k.load_rows(k.seq), k.load_rows(k.seq)
        du = [k.delta_u(delta, u) for _ in range(tiles)] if k.hoist else [None] * tiles
        for _ in range(state):
            a, carry = k.load_a(), None
            for s in range(tiles):
                accum[s] = k.step(delta, u, a, accum[s], carry, du[s])
                carry = k.last_scan
        k.store(accum)


_VARIANTS = {"v1": _v1, "v2": _v2, "v3": _v3}
_SEQ_TILE = {"v3": 512}           # mamba_v3's seq_len_fsize ("decided through empirical profiling")


def mamba_kernel_program(case: MambaCase, target: NeuronConfig, hoist_delta_u: bool,
                         channel_tiles: int | None = None) -> Program:
    """The kernel for one batch sample over ``channel_tiles`` tiles of 128 channels (all by default)."""
    if case.channels % _PARTITIONS:
        raise ValueError(f"channels must be a multiple of {_PARTITIONS} (the tutorial asserts it), got {case.channels}")
    program = Program(case.label.replace(" ", "_"), "kernel")
    kernel = _Kernel(Builder(program, target), case.seq, hoist_delta_u, _SEQ_TILE.get(case.variant))
    _VARIANTS[case.variant](kernel, channel_tiles or case.channels // _PARTITIONS, case.state)
    program.info.launch_overhead_ns = 0.0      # device latency, as the tutorial's profiles report it
    return program


def _run_ns(case: MambaCase, target: NeuronConfig, hoist: bool, tiles: int | None = None) -> float:
    return Simulator(target).run(mamba_kernel_program(case, target, hoist, tiles)).total_time_ns


def mamba_kernel_ns(case: MambaCase, target: NeuronConfig, hoist_delta_u: bool) -> float:
    """Predicted ns for all batch samples. v2/v3 channel tiles are independent outer iterations:
    simulated for one and two tiles and extrapolated (the second includes the overlap between
    tiles); v1's state-outer loop is simulated whole."""
    if case.variant == "v1":
        per_sample = _run_ns(case, target, hoist_delta_u)
    else:
        tiles = case.channels // _PARTITIONS
        one = _run_ns(case, target, hoist_delta_u, 1)
        per_sample = one if tiles == 1 else one + (tiles - 1) * (_run_ns(case, target, hoist_delta_u, 2) - one)
    return per_sample * case.batch


def vector_active(case: MambaCase, target: NeuronConfig, hoist_delta_u: bool) -> float:
    """VectorE busy share of the predicted time; v2/v3 channel tiles all keep VectorE equally busy."""
    tiles = None if case.variant == "v1" else 1
    trace = Simulator(target).run(mamba_kernel_program(case, target, hoist_delta_u, tiles))
    busy = trace.busy_ns_by_engine_class().get("vector", 0.0)
    if tiles:
        busy *= case.channels // _PARTITIONS
    return busy * case.batch / mamba_kernel_ns(case, target, hoist_delta_u)


def hbm_bytes(case: MambaCase, target: NeuronConfig) -> int:
    """HBM bytes the kernel as written loads and stores (v2/v3: one channel tile times the tiles)."""
    tiles = None if case.variant == "v1" else 1
    program = mamba_kernel_program(case, target, False, tiles)
    per_program = sum(ins.traffic.get("hbm_read_bytes", 0) + ins.traffic.get("hbm_write_bytes", 0)
                      for ins in program.instructions if ins.traffic)
    return per_program * (case.channels // _PARTITIONS if tiles else 1) * case.batch
