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
           "host_device", "is_data_free", "has_data_free", "to_data_free", "no_values_error",
           "LEAVE_HINT"]

HOST = torch.device("cpu")
META = torch.device("meta")
LEAVE_HINT = ("leave timing-only mode (torch.neuron.set_timing_only(False), or run outside "
              "`with torch.neuron.timing_only():`) and create the tensors again to compute values")


class TimingOnlyState:
    """Whether new device tensors are born without values, process-wide. ``enabled`` is a
    plain attribute because the factories read it on every allocation."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = False

    def reset(self) -> None:
        self.enabled = False


STATE = TimingOnlyState()


class TimingOnlyError(RuntimeError):
    """An operation needed the values of a tensor created in timing-only mode."""


def set_timing_only(enabled: bool = True) -> None:
    """Make new device tensors data-free (True) or hold host values again (False)."""
    STATE.enabled = bool(enabled)


def is_timing_only() -> bool:
    return STATE.enabled


@contextlib.contextmanager
def timing_only(enabled: bool = True):
    """``with torch.neuron.timing_only():`` tensors (and parameters) made inside hold no values."""
    previous = STATE.enabled
    STATE.enabled = bool(enabled)
    try:
        yield
    finally:
        STATE.enabled = previous


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


def rerun_data_free(func, host_args, host_kwargs, error: RuntimeError):
    """Run ``func`` again with every host tensor data-free, when it failed on a mix of tensors
    with and without values (e.g. an input made before the mode meets a data-free weight).

    Re-raises ``error`` when the failure was not about the mix (a shape error is a shape error);
    refuses an in-place op on a tensor with values, which would be left holding garbage.
    """
    if func in _VALUE_READERS:
        raise no_values_error(_describe(func)) from error
    tensors = [t for t in _flat_tensors((*host_args, *host_kwargs.values())) if t.dim()]
    if all(t.is_meta for t in tensors):
        raise error
    if func._schema.is_mutable and host_args and not is_data_free(host_args[0]):
        raise no_values_error(f"{func._schema.name} writing into a tensor with values") from error
    try:
        return func(*to_data_free(host_args), **{k: to_data_free(v) for k, v in host_kwargs.items()})
    except NotImplementedError as exc:
        raise no_values_error(f"{_describe(func)} (its output shape or result depends on the values)") from exc


def _flat_tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif v.__class__ in (list, tuple):
            yield from _flat_tensors(v)
