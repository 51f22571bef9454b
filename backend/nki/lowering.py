"""NKI kernels as ops of an op stream: a kernel registered under ``nki::<name>`` is lowered, when
its record reaches a session (eager or compiled), by tracing its source for the record's shapes
and dtypes (timing only) into the op's program.

The device layer registers a kernel when it makes it a ``torch.library`` op
(``backend.device.nki_ops``); records carry the tensor arguments as descriptors and the others
as attributes, which ``KernelOp.arguments`` puts back in call order.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backend.lowering.builder import OpContext
from backend.lowering.registry import namespace_lowering
from backend.nki.kernel import TensorSpec, trace_into
from backend.nki.tracer import DEFAULT_BUFFERS

__all__ = ["KernelOp", "register_kernel_op", "kernel_op", "NAMESPACE"]

NAMESPACE = "nki"
_OPS: dict = {}


@dataclass(frozen=True)
class KernelOp:
    """A kernel as an op: its function, its parameters (name, is-tensor) and how it is traced."""

    name: str                       # "nki::rmsnorm"
    fn: Callable
    params: tuple                   # ((name, is_tensor), ...) in call order
    buffers: int | None = DEFAULT_BUFFERS
    hoist: bool = False

    def arguments(self, inputs, attrs: dict) -> tuple:
        tensors = iter(inputs)
        return tuple(TensorSpec(tuple(d.shape), d.dtype) if is_tensor else attrs.get(name)
                     for name, is_tensor in self.params
                     for d in ([next(tensors)] if is_tensor else [None]))


def register_kernel_op(op: KernelOp) -> None:
    _OPS[op.name] = op


def kernel_op(name: str) -> KernelOp | None:
    return _OPS.get(name)


@namespace_lowering(NAMESPACE)
def _lower_kernel_op(ctx: OpContext):
    op = _OPS.get(ctx.record.name)
    if op is None:
        return False
    trace_into(op.fn, op.arguments(ctx.inputs, ctx.attrs), {}, ctx.builder, buffers=op.buffers, hoist=op.hoist)
    return True
