"""Timing-only mode: device tensors that keep shape, dtype, strides and aliasing but no values.

In this mode a new device tensor's host tensor (``DeviceTensor._inner``) is a ``meta`` tensor,
PyTorch's own data-free tensor: every aten op's meta kernel propagates sizes, strides and
views, so the device emits exactly the OpRecords it would emit with values and the simulator
times exactly the same programs, while host memory does not grow with the model. The device's
HBM books still count each storage's bytes, so a model that does not fit the simulated HBM
raises the device's out-of-memory error as it would with values.

The switch decides where *new* tensors are born (factories, host-to-device copies, ``.to``);
an op on a data-free tensor yields data-free results whether or not the mode is still on.
What needs values (``.item()``, printing, ``.cpu()``, ``.numpy()``, data-dependent shapes
such as ``nonzero`` or boolean masks) raises :class:`TimingOnlyError`.
"""
from __future__ import annotations

import contextlib

import torch

__all__ = ["TimingOnlyState", "STATE", "TimingOnlyError", "timing_only", "set_timing_only", "is_timing_only",
           "host_device", "is_data_free", "has_data_free", "to_data_free", "no_values_error", "unify",
           "check_decomposable", "check_value_reader",
           "LEAVE_HINT"]

HOST = torch.device("cpu")
META = torch.device("meta")
LEAVE_HINT = ("leave timing-only mode (torch.neuron.set_timing_only(False), or run outside "
              "`with torch.neuron.timing_only():`) and create the tensors again to compute values")


class TimingOnlyState:
    """Whether new device tensors are born without values, process-wide. ``enabled`` is a
    plain attribute because the factories read it on every allocation."""

    __slots__ = ("enabled", "ever_enabled")

    def __init__(self) -> None:
        self.enabled = False
        # Whether data-free tensors may exist: until then the device skips the per-op check
        # for a mix of tensors with and without values (host kernels do not all reject a mix).
        self.ever_enabled = False

    def set(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self.ever_enabled = self.ever_enabled or self.enabled

    def reset(self) -> None:
        self.enabled = False
        self.ever_enabled = False


STATE = TimingOnlyState()


class TimingOnlyError(RuntimeError):
    """An operation needed the values of a tensor created in timing-only mode."""


def set_timing_only(enabled: bool = True) -> None:
    """Make new device tensors data-free (True) or hold host values again (False)."""
    STATE.set(enabled)


def is_timing_only() -> bool:
    return STATE.enabled


@contextlib.contextmanager
def timing_only(enabled: bool = True):
    """``with torch.neuron.timing_only():`` tensors (and parameters) made inside hold no values."""
    previous = STATE.enabled
    STATE.set(enabled)
    try:
        yield
    finally:
        STATE.set(previous)


def host_device(host_inputs=()) -> torch.device:
    """Where the host side of a new device tensor lives: ``meta`` in the mode, or when it is
    computed from data-free tensors; the CPU otherwise."""
    if STATE.enabled or has_data_free(host_inputs):
        return META
    return HOST


def is_data_free(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_meta


def has_data_free(values) -> bool:
    """Whether any tensor in ``values`` (flat, or lists of tensors one level down) is data-free."""
    for v in values:
        if v.__class__ in (list, tuple):
            if has_data_free(v):
                return True
        elif isinstance(v, torch.Tensor) and v.is_meta:
            return True
    return False


def to_data_free(value):
    """``value`` with its host tensors replaced by data-free twins (same geometry, no copy)."""
    if isinstance(value, torch.Tensor):
        return value if value.is_meta else value.to(META)
    if value.__class__ in (list, tuple):
        return value.__class__(to_data_free(v) for v in value)
    return value


def no_values_error(what: str) -> TimingOnlyError:
    """The error for ``what`` (an op or method name) needing values a data-free tensor lacks."""
    return TimingOnlyError(
        f"{what} needs the values of a tensor created in timing-only mode, which holds only its "
        f"shape, dtype and strides (no values are computed in this mode); {LEAVE_HINT}.")


aten = torch.ops.aten
# Ops that hand values to Python or the host: they have nothing to hand over without values.
_VALUE_READERS = {
    aten._local_scalar_dense.default: "Tensor.item() (or int(t), float(t), bool(t), `if t:`)",
    aten.equal.default: "torch.equal",
    aten.allclose.default: "torch.allclose",
    aten.copy_.default: "copying into a tensor with values (.cpu(), .copy_())",
    aten._copy_from.default: "copying into a tensor with values (.cpu(), .copy_())",
    aten._copy_from_and_resize.default: "copying into a tensor with values (.cpu(), .copy_())",
}


def _describe(func) -> str:
    return _VALUE_READERS.get(func) or func._schema.name


def check_decomposable(func, decomposition, error: NotImplementedError) -> None:
    """Raise the timing-only error if a data-free op failed for want of values: it reads values
    out, or it has no meta kernel and no decomposition (data-dependent shapes: ``nonzero``,
    boolean masks, ``unique``, ``masked_select``)."""
    if func in _VALUE_READERS:
        raise no_values_error(_describe(func)) from error
    if decomposition is None:
        raise no_values_error(f"{_describe(func)} (its output shape or result depends on the values)") from error


def check_value_reader(func, error: RuntimeError) -> None:
    """Raise the timing-only error if a data-free op failed because it hands values out."""
    if func in _VALUE_READERS:
        raise no_values_error(_describe(func)) from error


_WRITTEN: dict = {}     # op -> positions and names of the arguments it writes


def _written(func) -> list:
    written = _WRITTEN.get(func)
    if written is None:
        written = _WRITTEN[func] = [(i, a.name) for i, a in enumerate(func._schema.arguments)
                                    if a.alias_info is not None and a.alias_info.is_write]
    return written


def unify(func, host_args, host_kwargs):
    """The host arguments with every tensor data-free if any of them is, else as they were.

    Host kernels do not all reject a mix of meta and CPU tensors (a CPU ``mm`` reads a meta
    operand's missing data), so a mix never reaches them: an input made with values before the
    mode meets data-free weights as its data-free twin. Writing data-free results into a
    tensor with values is refused: it would be left holding garbage.
    """
    tensors = list(_flat_tensors((*host_args, *host_kwargs.values())))
    metas = sum(t.is_meta for t in tensors)
    if metas == 0 or metas == len(tensors):
        return host_args, host_kwargs
    for i, name in _written(func):
        target = host_args[i] if i < len(host_args) else host_kwargs.get(name)
        if isinstance(target, torch.Tensor) and not target.is_meta:
            raise no_values_error(f"{func._schema.name} writing into a tensor with values")
    return to_data_free(host_args), {k: to_data_free(v) for k, v in host_kwargs.items()}


def _flat_tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif v.__class__ in (list, tuple):
            yield from _flat_tensors(v)
