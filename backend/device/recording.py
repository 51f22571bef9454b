"""The event stream of the device: one OpRecord per aten op executed on a simulated device.

Sinks (the simulator sessions) subscribe with ``recording(sink)``; with no sink the device
builds no records at all, so recording costs nothing when nobody listens.
"""
from __future__ import annotations

import contextlib
import itertools
import sys

import torch

from backend.sim.descriptors import OpRecord, TensorDesc

from . import numerics

__all__ = ["recording", "active_sinks", "suspended", "make_record", "describe", "fallback_ops"]

_sinks: list = []
_suspend_depth = 0
_counter = itertools.count()
_SCALARS = (int, float, bool, str, type(None))
fallback_ops: set[str] = set()   # aten names the device reports as host fallbacks
# Ops whose schema does not say "view" but which only re-describe existing memory.
ZERO_COPY_OPS = frozenset({"aten::_unsafe_view", "aten::lift_fresh", "aten::_reshape_alias"})


def active_sinks() -> list:
    """Sinks that should receive records now (empty while suspended)."""
    return _sinks if not _suspend_depth else []


@contextlib.contextmanager
def recording(sink, *, with_source: bool = False):
    """Feed every op executed on a simulated device to ``sink.feed(record)`` while active."""
    entry = (sink, with_source)
    _sinks.append(entry)
    try:
        yield sink
    finally:
        _sinks.remove(entry)


@contextlib.contextmanager
def suspended():
    """Run device ops without recording (e.g. while a compiler traces them)."""
    global _suspend_depth
    _suspend_depth += 1
    try:
        yield
    finally:
        _suspend_depth -= 1


def describe(t: torch.Tensor) -> TensorDesc:
    return TensorDesc(tuple(t.shape), str(t.dtype)[6:], tuple(t.stride()) if t.layout == torch.strided else None)


_ATTR_POSITIONS: dict = {}


def _attr_names(func) -> list:
    names = _ATTR_POSITIONS.get(func)
    if names is None:
        names = _ATTR_POSITIONS[func] = [
            (i, a.name) for i, a in enumerate(func._schema.arguments)
            if "Tensor" not in str(a.type)
        ]
    return names


def _plain(value):
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
        return list(value)
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return None


def _source_line() -> str | None:
    frame = sys._getframe(3)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/torch/" not in name and "/backend/" not in name and "/contextlib" not in name:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def make_record(func, args, kwargs, host_inputs, host_outputs, *, transfer=None, with_source=False) -> OpRecord:
    """Build the OpRecord of one executed op from its host-side inputs and outputs."""
    attrs = {}
    for i, name in _attr_names(func):
        value = args[i] if i < len(args) else kwargs.get(name)
        plain = _plain(value)
        if plain is not None:
            attrs[name] = plain
    if numerics.hardware_numerics_enabled() and func in numerics.MATMUL_OPS and any(t.dtype == torch.float32 for t in host_inputs):
        attrs["autocast"] = "bfloat16"   # hardware numerics: TensorE runs it at the bf16 rate
    name = func._schema.name
    return OpRecord(
        index=next(_counter),
        name=name,
        inputs=tuple(describe(t) for t in host_inputs),
        outputs=tuple(describe(t) for t in host_outputs),
        attrs=attrs,
        is_view=func.is_view or name in ZERO_COPY_OPS,
        fallback=name in fallback_ops,
        transfer=transfer,
        source=_source_line() if with_source else None,
    )


def emit(func, args, kwargs, host_inputs, host_outputs, transfer=None) -> None:
    for sink, with_source in active_sinks():
        sink.feed(make_record(func, args, kwargs, host_inputs, host_outputs,
                              transfer=transfer, with_source=with_source))
