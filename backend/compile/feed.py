"""Feeding compiled kernels to the recording sinks, by what the sink is, not by the device.

A sink with ``feed_kernel(name, records, internal_bytes_saved=0, nodes=(), source=None)`` (the GPU session,
and a NeuronCore session that grows one) takes a kernel directly. A NeuronCore session with
only ``feed(record)`` gets the kernel through an adapter that lowers the fused group with
``backend.lowering`` and appends the program's rollup to the session's trace.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.lowering import EagerSession, lower_kernel

from .kernels import KernelSpec

__all__ = ["feed_kernel", "register_kernel_adapter", "KernelAdapter"]


KernelAdapter = Callable[[object, KernelSpec], None]
_ADAPTERS: dict[type, KernelAdapter] = {}


def register_kernel_adapter(sink_type: type) -> Callable[[KernelAdapter], KernelAdapter]:
    """Register ``fn(sink, kernel)`` for sinks of ``sink_type`` that lack ``feed_kernel``."""

    def register(fn: KernelAdapter) -> KernelAdapter:
        if sink_type in _ADAPTERS:
            raise ValueError(f"duplicate kernel adapter for {sink_type.__name__}")
        _ADAPTERS[sink_type] = fn
        return fn

    return register


def _adapter_for(sink) -> KernelAdapter | None:
    for cls in type(sink).__mro__:
        if cls in _ADAPTERS:
            return _ADAPTERS[cls]
    return None


def feed_kernel(sink, kernel: KernelSpec) -> None:
    """Cost one compiled kernel on ``sink`` (its source line comes free from the FX graph, so
    it is attached whether or not the sink asked eager mode for sources)."""
    direct = getattr(sink, "feed_kernel", None)
    if direct is not None:
        direct(kernel.name, kernel.records, internal_bytes_saved=kernel.internal_bytes_saved,
               nodes=kernel.nodes, source=kernel.source)
    else:
        adapter = _adapter_for(sink)
        if adapter is None:
            raise TypeError(
                f"{type(sink).__name__} cannot take compiled kernels: it has no feed_kernel() "
                f"and no adapter is registered (backend.compile.feed.register_kernel_adapter)")
        adapter(sink, kernel)


@register_kernel_adapter(EagerSession)
def _neuron_session_kernel(session: EagerSession, kernel: KernelSpec) -> None:
    """One fused program on the NeuronCore timeline (intermediates in SBUF where they fit)."""
    program = lower_kernel(kernel.name, kernel.records, session.target, inputs_from=kernel.inputs_from,
                           outputs_to_hbm=kernel.outputs_to_hbm, nodes=kernel.nodes)
    program.info.source = kernel.source
    session.feed_program(program)
