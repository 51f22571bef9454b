"""The NKI fused-Mamba tutorial's kernels (``mamba_v1``/``v2``/``v3``), run from their source.

The tutorial (NKI docs, "Fused Mamba") publishes device latencies of its three kernels at four
shapes; each kernel runs as published (``nki_tutorials.mamba``, NKI Beta 1) through the NKI
front end, one instruction per NKI call, from the same cost formulas and scheduler as every
other row. The front end maps the calls as the tutorial describes them: ``activation(exp,
delta_i, scale=A_i)`` on ScalarE, the partition broadcasts of the [1, seq] ``B_i`` / ``C_i`` rows
on TensorE into PSUM (so the products with them read one input from PSUM: N cycles), the fp32
SBUF x SBUF products, the scan and the accumulation at 2N on VectorE.

What the tutorial leaves to the compiler is bracketed, not chosen: in v2 and v3 ``deltaU`` does
not depend on the state, and its inputs are loaded outside the state loop, so the compiler may
hoist it (low end: the front end's ``hoist``, which runs an instruction equal to one already run
on unchanged inputs once) or run it per state as written (high end). In v1 the inputs are
reloaded inside the loop (the tutorial's profile warns about the reloads), so there is nothing to
hoist. Every loop is ``affine_range`` (v3's seq loop ``static_range``), so loads may run ahead of
their use: tiles get as many buffers as iterations (``buffers=None``).
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.nki import TensorSpec, run_kernel
from backend.nki.kernel import on_target
from backend.sim import Program, Simulator
from backend.sim.presets import NeuronConfig
from benchmarks.fidelity.nki_tutorials import mamba as tutorial

__all__ = ["MambaCase", "MAMBA_CASES", "mamba_kernel_program", "mamba_kernel_ns", "vector_active", "hbm_bytes"]

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


_KERNELS = {"v1": tutorial.mamba_v1, "v2": tutorial.mamba_v2, "v3": tutorial.mamba_v3}
_TRACED: dict = {}


def mamba_kernel_program(case: MambaCase, target: NeuronConfig, hoist_delta_u: bool,
                         channel_tiles: int | None = None) -> Program:
    """The kernel for one batch sample over ``channel_tiles`` tiles of 128 channels (all by default)."""
    if case.channels % _PARTITIONS:
        raise ValueError(f"channels must be a multiple of {_PARTITIONS} (the tutorial asserts it), got {case.channels}")
    channels = (channel_tiles or case.channels // _PARTITIONS) * _PARTITIONS
    key = (case.variant, case.seq, channels, case.state, hoist_delta_u, target.name)
    if key not in _TRACED:
        args = (TensorSpec((1, channels, case.seq)), TensorSpec((1, channels, case.seq)),
                TensorSpec((channels, case.state)), TensorSpec((1, case.state, case.seq)),
                TensorSpec((1, case.state, case.seq)))
        _TRACED[key] = run_kernel(_KERNELS[case.variant].fn, args, target=target, buffers=None, hoist=hoist_delta_u,
                                  name=case.label.replace(" ", "_")).program
    return on_target(_TRACED[key], target)


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
