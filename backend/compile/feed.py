"""Feeding compiled kernels to the recording sinks, by what the sink is, not by the device.

A sink with ``feed_kernel(name, records, internal_bytes_saved=0, nodes=(), source=None)`` (the GPU session,
and a NeuronCore session that grows one) takes a kernel directly. A NeuronCore session with
only ``feed(record)`` gets the kernel through an adapter that lowers the fused group with
``backend.lowering`` and appends the program's rollup to the session's trace.

``feed_graph`` feeds one call of a graph. The Neuron runtime loads a compiled graph as one NEFF
and runs a call of it with one launch, so on the NeuronCore only the first kernel fed per call
pays the launch overhead; a GPU sink launches every kernel (Inductor's kernels are separate
CUDA launches) and keeps its own rule.

What the compiler does once per graph rather than per call is paid at the graph's first call
(on every sink recording it, once per sink): parameter relayouts (``ParamLayout``, fed as a
copy kernel before the first kernel that reads it) and hoisted kernels. The runtime reports
the end of each call with ``first_call_done``, recorded or not. On the NeuronCore, values handed from one kernel to the next
(``Handoff``) stay in SBUF when they fit beside both kernels' working sets, and a kernel's
other inputs (``prefetchable_bytes``) may load while the kernel before it computes.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable

from backend.lowering import EagerSession, lower_kernel

from .kernels import Handoff, KernelSpec

__all__ = ["feed_kernel", "feed_graph", "register_kernel_adapter", "KernelAdapter", "kept_in_sbuf", "first_call_done",
           "skip_first_call", "prefetchable_bytes"]


KernelAdapter = Callable[[object, KernelSpec, bool], None]    # (sink, kernel, launch)
_ADAPTERS: dict[type, KernelAdapter] = {}
# sink -> {id: object} of the ParamLayouts and hoisted kernels it has already paid for
_PAID: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def register_kernel_adapter(sink_type: type) -> Callable[[KernelAdapter], KernelAdapter]:
    """Register ``fn(sink, kernel, launch)`` for sinks of ``sink_type`` that lack ``feed_kernel``."""

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


def _once_per_graph(kernels) -> list:
    return [once for kernel in kernels for once in ((kernel,) if kernel.hoisted else kernel.layouts)]


def first_call_done(kernels) -> None:
    """A call of the graph of ``kernels`` has run: its relayouts and hoisted kernels are done."""
    for once in _once_per_graph(kernels):
        once.done = True


def skip_first_call(sink, kernels) -> None:
    """Let ``sink`` see only the per-call work of ``kernels`` (steady-state costing)."""
    paid = _PAID.setdefault(sink, {})
    for once in _once_per_graph(kernels):
        paid[id(once)] = once


def _pay_once(sink, once) -> bool:
    """True the first time ``once`` (a relayout or hoisted kernel) is fed to ``sink`` during
    the graph's first call."""
    paid = _PAID.setdefault(sink, {})
    if once.done or id(once) in paid:
        return False
    paid[id(once)] = once
    return True


def feed_graph(sink, kernels) -> None:
    """Cost one call of a compiled graph on ``sink``: its kernels in order, the first one fed
    launching the graph (hoisted kernels already run are not fed, so cannot launch it)."""
    launch = True
    for kernel in kernels:
        if feed_kernel(sink, kernel, launch=launch):
            launch = False


def feed_kernel(sink, kernel: KernelSpec, *, launch: bool = True) -> bool:
    """Cost one compiled kernel on ``sink`` (its source line comes free from the FX graph, so
    it is attached whether or not the sink asked eager mode for sources). ``launch``: it starts
    its graph's launch (see the module docstring). False when there was nothing to feed (a
    hoisted kernel already run)."""
    if kernel.hoisted and not _pay_once(sink, kernel):
        return False
    direct = getattr(sink, "feed_kernel", None)
    adapter = None if direct is not None else _adapter_for(sink)
    if direct is None and adapter is None:
        raise TypeError(
            f"{type(sink).__name__} cannot take compiled kernels: it has no feed_kernel() "
            f"and no adapter is registered (backend.compile.feed.register_kernel_adapter)")
    for layout in kernel.layouts:
        if _pay_once(sink, layout):
            once = KernelSpec(name=f"layout_{layout.parameter}", kind="layout", nodes=(layout.parameter,),
                              records=[layout.record], internal_bytes_saved=0, source=layout.record.source)
            direct(once.name, once.records, nodes=once.nodes, source=once.source) if direct else adapter(sink, once, True)
    if direct is not None:
        direct(kernel.name, kernel.records, internal_bytes_saved=kernel.internal_bytes_saved,
               nodes=kernel.nodes, source=kernel.source)
    else:
        adapter(sink, kernel, launch)
    return True


def kept_in_sbuf(handoff: Handoff | None, target) -> tuple:
    """The values of ``handoff`` that stay in SBUF on ``target``: greedily, in order, while
    they fit in the usable SBUF beside the larger of the two kernels' own working sets."""
    if handoff is None:
        return ()
    if target.name not in handoff.kept:
        working = max(_standalone_sbuf_bytes(k, target) for k in (handoff.producer, handoff.consumer))
        room = target.sbuf_usable_bytes - working
        kept = []
        for value in handoff.values:
            if value.nbytes <= room:
                kept.append(value)
                room -= value.nbytes
        handoff.kept[target.name] = tuple(kept)
    return handoff.kept[target.name]


def prefetchable_bytes(kernel: KernelSpec) -> int:
    """Bytes of the kernel's HBM inputs that the kernel right before it does not produce
    (parameters, graph inputs, older kernels' values): the Neuron compiler may load them while
    that kernel still computes. Inputs reached through a view are left out (conservative)."""
    from_previous = {ref for value in (kernel.handoff_in.values if kernel.handoff_in else ()) for ref in value.inputs}
    total = 0
    for j, record in enumerate(kernel.records):
        if record.is_view:
            continue
        sources = kernel.inputs_from[j] if j < len(kernel.inputs_from) else ()
        for i, desc in enumerate(record.inputs):
            inside = i < len(sources) and sources[i] is not None
            if not inside and (j, i) not in from_previous:
                total += desc.nbytes
    return total


def _standalone_sbuf_bytes(kernel: KernelSpec, target) -> int:
    return _lower(kernel, target, (), ()).info.sbuf_peak_bytes


def _lower(kernel: KernelSpec, target, kept_in: tuple, kept_out: tuple):
    outputs_to_hbm = [list(flags) for flags in kernel.outputs_to_hbm]
    for value in kept_out:
        j, k = value.output
        if value.exclusive and j < len(outputs_to_hbm) and k < len(outputs_to_hbm[j]):
            outputs_to_hbm[j][k] = False
    return lower_kernel(kernel.name, kernel.records, target, inputs_from=kernel.inputs_from,
                        outputs_to_hbm=outputs_to_hbm, nodes=kernel.nodes,
                        resident_inputs=[value.inputs for value in kept_in])


@register_kernel_adapter(EagerSession)
def _neuron_session_kernel(session: EagerSession, kernel: KernelSpec, launch: bool) -> None:
    """One fused program on the NeuronCore timeline (intermediates in SBUF where they fit, and
    values handed to or from the neighbouring kernels kept there where they fit too); only the
    kernel that launches its graph's NEFF pays the launch overhead."""
    target = session.target
    program = _lower(kernel, target, kept_in_sbuf(kernel.handoff_in, target), kept_in_sbuf(kernel.handoff_out, target))
    if not launch:
        program.info.launch_overhead_ns = 0.0
    program.info.source = kernel.source
    program.info.prefetch_bytes = prefetchable_bytes(kernel)
    session.feed_program(program)
