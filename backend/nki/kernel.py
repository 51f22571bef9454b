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
from backend.nki.tracer import DEFAULT_BUFFERS, KernelTracer, TooManyBuffers, tracing
from backend.sim.ir import Program
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target

__all__ = ["TensorSpec", "KernelRun", "run_kernel", "trace_into", "spec_tensor", "on_target"]


@dataclass(frozen=True)
class TensorSpec:
    """A kernel argument by shape and dtype, with its values (``data``, held in float32 or int64
    whatever ``dtype`` says) or without (timing only)."""

    shape: tuple
    dtype: str = "float32"
    data: np.ndarray | None = field(default=None, compare=False, repr=False)
    # The shape of the HBM tensor this argument is the leading slice of (row lengths decide DMA
    # descriptor sizes): tracing one loop iteration on its slice of a large operand.
    within: tuple | None = None


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
        tensor = Tensor(value.shape, value.dtype, "hbm", name=name, data=value.data, values=known)
        tensor.original = value.data
        if value.within is not None:
            tensor.layout = tuple(value.within)
        return tensor, known
    if isinstance(value, np.ndarray):
        dtype = "bfloat16" if str(value.dtype) == "bfloat16" else value.dtype
        data = value.astype(np.float32) if str(value.dtype) == "bfloat16" else value
        tensor = Tensor(value.shape, dtype_name(dtype), "hbm", name=name, data=data)
        tensor.original = data
        return tensor, True
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
                t.data = t.original = None
    program, start = builder.program, len(builder.program.instructions)
    single: dict = {}
    while True:
        tracer = KernelTracer(builder, values=values, buffers=buffers, hoist=hoist, site_buffers=single)
        returned = None
        with tracing(tracer):
            for position in _grid_positions(grid):
                tracer.grid, tracer.program_ids = tuple(grid), position
                returned = fn(*converted, **kw)
        try:
            tracer.finish()
            return tracer, returned, converted
        except TooManyBuffers as fewer:      # single-buffer the largest tile and run again
            single[fewer.site] = 1
            del program.instructions[start:]
            converted, kw = _fresh(converted), {k: _fresh([v])[0] for k, v in kw.items()}


def _fresh(values: list) -> list:
    """The HBM arguments again, with their values as given and no access history."""
    out = []
    for v in values:
        if isinstance(v, Tensor) and v.memory == "hbm":
            copy = Tensor(v.shape, v.dtype, "hbm", name=v.name, data=v.original, values=v.original is not None)
            copy.original, copy.layout = v.original, v.layout
            v = copy
        out.append(v)
    return out


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


def on_target(program: Program, target: NeuronConfig) -> Program:
    """A traced program for another target: the same instructions, its transfers spread over
    that target's DMA engines (the one thing tracing took from the target besides the capacity
    checks), so a what-if re-simulates a kernel without tracing it again."""
    from dataclasses import replace

    from backend.lowering.builder import dma_engines_for

    out = Program(program.name, program.kind, sync=program.sync)
    out.info = program.info
    for ins in program.instructions:
        if ins.engine == "dma":
            on_chip = "sbuf" in (ins.src, ins.dst)
            engines = dma_engines_for(ins.partitions, target) if on_chip else target.dma_engines
            if engines != ins.dma_engines:
                ins = replace(ins, dma_engines=engines)
        out.instructions.append(ins)
    return out
