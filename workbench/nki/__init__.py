"""Write NKI kernels in the notebook: ``from workbench import nki``, then ``import
workbench.nki.language as nl`` and ``import workbench.nki.isa as nisa``.

The dialect is NKI Beta 1 (``neuronxcc.nki``, Neuron SDK 2.26), the one the published tutorials
are written in (see ``backend.nki``). A ``@nki.jit`` kernel called with numpy arrays returns numpy
arrays (as ``nki.simulate_kernel`` does); called with torch tensors (CPU or ``neuron``) it runs as
the op ``nki::<name>`` (eagerly or inside ``torch.compile(backend="neuron")``) and returns
tensors. What NKI's own simulator cannot say, this one does: ``kernel.simulate(...)`` gives the
latency, each engine's busy time and the instruction timeline (``.profile().show()``,
``.profile().export_chrome_trace(path)``), and ``nki.benchmark`` reports latency percentiles
as ``nki.benchmark`` does on hardware (the simulator is deterministic, so they coincide).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from backend.nki import DEFAULT_BUFFERS, NKI_VERSION, KernelRun, NKIError, TensorSpec, run_kernel
from backend.recording import current_target
from backend.sim import Simulator, get_target
from backend.sim.trace import Trace
from workbench.nki import isa, language, typing

__all__ = ["jit", "simulate_kernel", "benchmark", "profile", "Kernel", "KernelResult", "BenchmarkResult",
           "NKIError", "TensorSpec", "NKI_VERSION", "language", "isa", "typing"]


@dataclass
class KernelResult:
    """One simulated run of a kernel: its outputs (numpy, or None for timing only), its program and
    its trace on the target."""

    name: str
    outputs: tuple | None
    run: KernelRun
    trace: Trace
    target: str

    @property
    def output(self):
        """The single output (for kernels returning one tensor)."""
        return self.outputs[0] if self.outputs else None

    @property
    def latency_ns(self) -> float:
        return self.trace.total_time_ns

    @property
    def engine_busy_ns(self) -> dict:
        """Busy ns per engine class (tensor, vector, scalar, gpsimd, dma), as the profiler counts it."""
        return dict(self.trace.busy_ns_by_engine_class())

    @property
    def instruction_counts(self) -> dict:
        return dict(self.trace.ops[0].instruction_counts) if self.trace.ops else {}

    def profile(self):
        """The run as a workbench Profile: ``.show()`` for the dashboard and its engine timeline,
        ``.export_chrome_trace(path)`` for Perfetto."""
        from workbench.profiles import Profile

        return Profile(self.trace, meta={"device": "neuron", "target": self.target, "kernel": self.name,
                                         "nki_version": NKI_VERSION})

    def summary(self) -> dict:
        """Latency and each engine's busy share of it (DMA: averaged over the core's DMA engines)."""
        busy = self.engine_busy_ns
        engines = {"dma": get_target(self.target).dma_engines}
        return {"kernel": self.name, "target": self.target, "latency_us": self.latency_ns / 1e3,
                **{f"{engine}_busy_percent": 100 * ns / engines.get(engine, 1) / self.latency_ns
                   for engine, ns in sorted(busy.items()) if self.latency_ns},
                "instructions": sum(self.instruction_counts.values())}

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{k}</td><td>{v:.4g}</td></tr>" if isinstance(v, float) else
                       f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in self.summary().items())
        return f"<table>{rows}</table>"


class Kernel:
    """A ``@nki.jit`` kernel. ``buffers``: physical buffers per tile declared in a loop (None: as
    many as iterations); ``hoist``: run loop-invariant instructions once (a compiler's choice the
    kernel text leaves open); ``target``: the NeuronCore (default: the active device's)."""

    def __init__(self, fn, *, buffers: int | None = DEFAULT_BUFFERS, hoist: bool = False, target=None,
                 grid: tuple = ()):
        functools.update_wrapper(self, fn)
        self.fn, self.buffers, self.hoist, self.target, self.grid = fn, buffers, hoist, target, tuple(grid)
        self._torch_call = _graph_call(self)

    def __getitem__(self, grid) -> "Kernel":
        """``kernel[2, 2](...)``: an SPMD launch; the instances run one after another on one core."""
        grid = grid if isinstance(grid, tuple) else (grid,)
        return Kernel(self.fn, buffers=self.buffers, hoist=self.hoist, target=self.target, grid=grid)

    def options(self, **changes) -> "Kernel":
        """The same kernel with other ``buffers`` / ``hoist`` / ``target``."""
        opts = {"buffers": self.buffers, "hoist": self.hoist, "target": self.target, "grid": self.grid, **changes}
        return Kernel(self.fn, **opts)

    def _target(self, target=None):
        return get_target(target or self.target or current_target())

    def __call__(self, *args, **kwargs):
        from backend.nki.tracer import _STACK
        if _STACK:                       # called from inside another kernel: inline it
            return self.fn(*args, **kwargs)
        if _has_torch_tensor(args, kwargs):
            if kwargs:
                raise TypeError(f"{self.__name__}: pass a kernel's arguments positionally when calling it with tensors")
            return self._torch_call(*args)
        run = run_kernel(self.fn, args, kwargs, target=self._target(), buffers=self.buffers, hoist=self.hoist,
                         grid=self.grid, name=self.__name__)
        if run.outputs is None:
            return run.returned
        return run.outputs[0] if len(run.outputs) == 1 else run.outputs

    def simulate(self, *args, target=None, **kwargs) -> KernelResult:
        """Run the kernel: values (when the arguments have them) and its timeline on ``target``."""
        t = self._target(target)
        run = run_kernel(self.fn, args, kwargs, target=t, buffers=self.buffers, hoist=self.hoist, grid=self.grid,
                         name=self.__name__)
        trace = Simulator(t).run(run.program)
        return KernelResult(self.__name__, run.outputs, run, trace, t.name)

    def __repr__(self) -> str:
        return f"<nki kernel {self.__name__} buffers={self.buffers} hoist={self.hoist}>"


def _has_torch_tensor(args, kwargs) -> bool:
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values()))


def _graph_call(kernel: Kernel):
    """The kernel's entry point for torch tensors: the op ``nki::<name>`` (made on first use).
    Dynamo puts a call of it in the graph as one node (``allow_in_graph``) instead of tracing
    into the op's creation; AOTAutograd then sees the custom op itself."""
    import torch

    def call(*args):
        from backend.device.nki_ops import kernel_op

        if kernel.grid:
            raise NotImplementedError("SPMD grids are not supported for kernels called from PyTorch")
        return kernel_op(kernel.fn, kernel.__name__, args, buffers=kernel.buffers, hoist=kernel.hoist)(*args)

    call.__name__ = call.__qualname__ = f"nki_{kernel.__name__}"
    return torch._dynamo.allow_in_graph(call)


def jit(func=None, *, buffers: int | None = DEFAULT_BUFFERS, hoist: bool = False, target=None, **ignored):
    """``@nki.jit`` (or ``@nki.jit(buffers=1)``): make a function written in NKI a kernel.
    ``mode=`` and other compiler options of ``neuronxcc`` are accepted and ignored."""
    if func is None:
        return lambda f: Kernel(f, buffers=buffers, hoist=hoist, target=target)
    return Kernel(func, buffers=buffers, hoist=hoist, target=target)


def _as_kernel(kernel) -> Kernel:
    return kernel if isinstance(kernel, Kernel) else Kernel(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    """``nki.simulate_kernel(kernel, *numpy_arrays)``: the kernel's outputs as numpy arrays."""
    result = _as_kernel(kernel).simulate(*args, **kwargs)
    if result.outputs is None:
        raise ValueError("simulate_kernel needs arguments with values (numpy arrays), not shapes")
    return result.outputs[0] if len(result.outputs) == 1 else result.outputs


class _Latency:
    """``benchmark_result.nc_latency``: percentiles in microseconds, as NKI reports them."""

    def __init__(self, samples_us: list):
        self.samples_us = samples_us

    def get_latency_percentile(self, percentile: float) -> float:
        ordered = sorted(self.samples_us)
        rank = min(len(ordered) - 1, max(0, round(percentile / 100 * (len(ordered) - 1))))
        return ordered[rank]


@dataclass
class BenchmarkResult:
    nc_latency: _Latency
    result: KernelResult


class _BenchmarkedKernel:
    def __init__(self, kernel: Kernel, warmup: int, iters: int, target):
        self.kernel, self.warmup, self.iters, self.target = kernel, warmup, iters, target
        self.benchmark_result: BenchmarkResult | None = None
        functools.update_wrapper(self, kernel.fn)

    def __call__(self, *args, **kwargs):
        result = self.kernel.simulate(*args, target=self.target, **kwargs)
        # One simulated run is exact and deterministic: every iteration takes the same time.
        self.benchmark_result = BenchmarkResult(_Latency([result.latency_ns / 1e3] * max(1, self.iters)), result)
        if result.outputs is None:
            return result.run.returned
        return result.outputs[0] if len(result.outputs) == 1 else result.outputs


def benchmark(kernel=None, *, warmup: int = 5, iters: int = 10, target=None, **ignored):
    """``nki.benchmark(kernel, warmup=5, iters=10)`` (or as a decorator): calling the result runs
    the kernel and sets ``.benchmark_result.nc_latency.get_latency_percentile(p)`` (us)."""
    if kernel is None:
        return lambda k: _BenchmarkedKernel(_as_kernel(k), warmup, iters, target)
    return _BenchmarkedKernel(_as_kernel(kernel), warmup, iters, target)


def profile(kernel=None, *, target=None, **ignored):
    """``nki.profile(kernel)(*args)`` returns the run's workbench Profile (dashboard, timeline)."""
    def wrap(k):
        return lambda *args, **kwargs: _as_kernel(k).simulate(*args, target=target, **kwargs).profile()
    return wrap if kernel is None else wrap(kernel)
