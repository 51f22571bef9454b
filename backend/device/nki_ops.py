"""NKI kernels as PyTorch ops: ``kernel_op(kernel, args)`` makes a ``torch.library.custom_op``
(``nki::<name>``) with a fake implementation, so a kernel runs on ``neuron`` tensors eagerly and
inside ``torch.compile(backend="neuron")`` graphs, and shows as one op in profiles.

The op's host implementation runs the kernel's values with numpy (``backend.nki.run_kernel``);
the device dispatcher runs it on the host copies of ``neuron`` tensors, as it runs every op, and
records it; the session lowers the record by tracing the kernel's source for its shapes
(``backend.nki.lowering``). The fake implementation traces it for shapes only (cached per input
shapes) to say what it returns.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import torch

from backend.nki import TensorSpec, run_kernel
from backend.nki.lowering import NAMESPACE, KernelOp, register_kernel_op

__all__ = ["kernel_op", "torch_dtype"]

_OPS: dict = {}            # (kernel function, argument kinds, options) -> the op
_NAMES = itertools.count()
_SCALARS = {bool: "bool", int: "int", float: "float"}


def torch_dtype(name: str) -> torch.dtype:
    return torch.bool if name == "bool_" else getattr(torch, name)


def _spec(t: torch.Tensor, with_values: bool) -> TensorSpec:
    dtype = str(t.dtype).removeprefix("torch.")
    data = None
    if with_values:
        host = t.detach().cpu()
        data = host.to(torch.float32 if host.is_floating_point() else torch.int64).numpy()
    return TensorSpec(tuple(t.shape), dtype, data)


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    kind = _SCALARS.get(type(value))
    if kind is None:
        raise TypeError(f"an NKI kernel called from PyTorch takes tensors, bools, ints and floats; "
                        f"got {type(value).__name__}")
    return kind


def _outputs(fn, specs, buffers, hoist, name) -> tuple:
    run = run_kernel(fn, tuple(specs), buffers=buffers, hoist=hoist, name=name)
    returned = run.returned if isinstance(run.returned, (tuple, list)) else (run.returned,)
    return tuple((tuple(t.shape), t.dtype) for t in returned)


def kernel_op(fn, name: str, args: tuple, *, buffers, hoist):
    """The torch op (an ``OpOverload``-like callable) running kernel ``fn`` on arguments like ``args``."""
    kinds = tuple(_kind(a) for a in args)
    key = (fn, kinds, buffers, hoist)
    op = _OPS.get(key)
    if op is not None:
        return op
    params = tuple((f"arg{i}", kind == "Tensor") for i, kind in enumerate(kinds))
    specs = [_spec(a, False) if isinstance(a, torch.Tensor) else a for a in args]
    returns = _outputs(fn, specs, buffers, hoist, name)
    qualname = f"{NAMESPACE}::{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{next(_NAMES)}"
    signature = ", ".join(f"{kind} arg{i}" for i, kind in enumerate(kinds))
    result = "Tensor" if len(returns) == 1 else "(" + ", ".join(["Tensor"] * len(returns)) + ")"
    shapes: dict = {}

    def host(*call_args):
        run = run_kernel(fn, tuple(_spec(a, True) if isinstance(a, torch.Tensor) else a for a in call_args),
                         buffers=buffers, hoist=hoist, name=name)
        returned = run.returned if isinstance(run.returned, (tuple, list)) else (run.returned,)
        device = next((a.device for a in call_args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        outs = tuple(torch.from_numpy(np.ascontiguousarray(v)).to(device=device, dtype=torch_dtype(t.dtype))
                     for v, t in zip(run.outputs, returned))
        return outs[0] if len(outs) == 1 else outs

    def fake(*call_args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in call_args)
        out = shapes.get(key)
        if out is None:
            out = shapes[key] = _outputs(fn, [_spec(a, False) if isinstance(a, torch.Tensor) else a
                                              for a in call_args], buffers, hoist, name)
        device = next(a.device for a in call_args if isinstance(a, torch.Tensor))
        outs = tuple(torch.empty(shape, dtype=torch_dtype(dtype), device=device) for shape, dtype in out)
        return outs[0] if len(outs) == 1 else outs

    op = torch.library.custom_op(qualname, host, mutates_args=(), schema=f"({signature}) -> {result}")
    op.register_fake(fake)
    register_kernel_op(KernelOp(qualname, fn, params, buffers, hoist))
    _OPS[key] = op
    return op
