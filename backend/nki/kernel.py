"""Running an NKI kernel function: arguments into HBM tensors, the body traced into one Program
(``kind="kernel"``), the returned HBM tensors' values out.

``run_kernel(fn, args)`` is the whole front end for a caller: it returns a ``KernelRun`` with the
Program (simulate it with ``backend.sim.Simulator``) and, when every tensor argument carried
values, the outputs as numpy arrays. Arguments without values (``TensorSpec``, or
``nki.typing.tensor[[shape], dtype]``) trace for timing only: the same instructions, no numpy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from backend.lowering.builder import Builder
from backend.nki.dtypes import dtype_name
from backend.nki.errors import nki_error
from backend.nki.tensors import Tensor
from backend.nki.tracer import DEFAULT_BUFFERS, KernelTracer, tracing
from backend.sim.ir import Program
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target

__all__ = ["TensorSpec", "KernelRun", "run_kernel", "trace_into", "spec_tensor"]


@dataclass(frozen=True)
class TensorSpec:
    """A kernel argument by shape and dtype, with its values (``data``, held in float32 or int64
    whatever ``dtype`` says) or without (timing only)."""

    shape: tuple
    dtype: str = "float32"
    data: np.ndarray | None = field(default=None, compare=False, repr=False)


class _SpecFactory:
    """``nki.typing.tensor[[8192, 4096], nl.bfloat16]``, as the tutorials declare benchmark inputs."""

    def __getitem__(self, key) -> TensorSpec:
        shape, dtype = key
        return TensorSpec(tuple(int(n) for n in shape), dtype_name(dtype))


spec_tensor = _SpecFactory()


@dataclass
class KernelRun:
    """One traced kernel: its Program, its outputs' values (None for timing only) and the tracer."""

    name: str
    program: Program
    outputs: tuple | None
    returned: object = None            # the kernel's return value with HBM tensors as given
    tracer: KernelTracer | None = field(default=None, repr=False)


def _to_hbm(value, name: str):
    if isinstance(value, TensorSpec):
        known = value.data is not None
        return Tensor(value.shape, value.dtype, "hbm", name=name, data=value.data, values=known), known
    if isinstance(value, np.ndarray):
        dtype = "bfloat16" if str(value.dtype) == "bfloat16" else value.dtype
        data = value.astype(np.float32) if str(value.dtype) == "bfloat16" else value
        return Tensor(value.shape, dtype_name(dtype), "hbm", name=name, data=data), True
    return value, None


def trace_into(fn: Callable, args: tuple, kwargs: dict, builder: Builder, *, buffers: int | None = DEFAULT_BUFFERS,
               hoist: bool = False, grid: tuple = ()):
    """Run ``fn`` with its instructions appended to ``builder``; returns (tracer, returned, hbm args)."""
    converted, has_values = [], []
    for i, a in enumerate(args):
        value, known = _to_hbm(a, f"arg{i}")
        converted.append(value)
        if known is not None:
            has_values.append(known)
    kw = {}
    for key, a in kwargs.items():
        value, known = _to_hbm(a, key)
        kw[key] = value
        if known is not None:
            has_values.append(known)
    values = all(has_values)
    if not values:      # one timing-only argument makes the whole run timing-only
        for t in [*converted, *kw.values()]:
            if isinstance(t, Tensor):
                t.data = None
    tracer = KernelTracer(builder, values=values, buffers=buffers, hoist=hoist)
    returned = None
    with tracing(tracer):
        instances = _grid_positions(grid)
        for position in instances:
            tracer.grid, tracer.program_ids = tuple(grid), position
            returned = fn(*converted, **kw)
    tracer.finish()
    return tracer, returned, converted


def _grid_positions(grid: tuple) -> list:
    positions = [()]
    for n in grid:
        positions = [(*p, i) for p in positions for i in range(n)]
    return positions


def run_kernel(fn: Callable, args: tuple = (), kwargs: dict | None = None, *,
               target: str | NeuronConfig = DEFAULT_NEURON_TARGET, buffers: int | None = DEFAULT_BUFFERS,
               hoist: bool = False, grid: tuple = (), name: str | None = None) -> KernelRun:
    """Trace ``fn(*args, **kwargs)`` on ``target``; see the module docstring."""
    t = get_target(target)
    name = name or getattr(fn, "__name__", "nki_kernel")
    program = Program(name, "kernel")
    program.info.launch_overhead_ns = 0.0       # device latency, as NKI's benchmark reports it
    tracer, returned, _ = trace_into(fn, args, kwargs or {}, Builder(program, t), buffers=buffers, hoist=hoist,
                                     grid=grid)
    results = returned if isinstance(returned, (tuple, list)) else (returned,)
    tensors = [r for r in results if isinstance(r, Tensor)]
    for r in tensors:
        if r.memory != "hbm":
            raise nki_error("err_tensor_output_not_written_back",
                            f"kernel {name} returns an on-chip tile {list(r.shape)}; return HBM tensors "
                            "(nl.ndarray(..., buffer=nl.shared_hbm)) written with nl.store")
        if not any(w for _, _, w in r.accesses):
            raise nki_error("err_tensor_output_not_written_back",
                            f"kernel {name} returns {list(r.shape)} without ever storing into it")
    outputs = tuple(r.data.reshape(r.shape).copy() for r in tensors) if tracer.values else None
    return KernelRun(name, program, outputs, returned, tracer)
