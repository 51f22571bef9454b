"""Timing-only mode: device tensors that keep shape, dtype, strides and aliasing but no values.

In this mode a new device tensor's host tensor (``DeviceTensor._inner``) is a ``meta`` tensor,
PyTorch's own data-free tensor: every aten op's meta kernel propagates sizes, strides and
views, so the device emits exactly the OpRecords it would emit with values and the simulator
times exactly the same programs, while host memory does not grow with the model. The device's
HBM books still count each storage's bytes, so a model that does not fit the simulated HBM
raises the device's out-of-memory error as it would with values.

The rule for values (docs/numerics.md, "Timing-only mode"):
- A new device tensor of at most ``values_up_to`` elements (default 65,536) keeps its values,
  computed on the host as without the mode: masks, position ids, token ids, scalars. Programs
  read such tensors to decide what to do (``mask.all()``, ``.item()``); their values are exact,
  so the path taken is the path the program takes with values. Each is counted
  (``values_kept()``) and reported in the profile.
- A larger new tensor is data-free, and so is every result computed from a data-free tensor,
  whether or not the mode is still on.
- Writing a data-free result into a tensor with values (an optimizer step on real weights with
  timing-only gradients, DDP copying a timing-only gradient into its bucket) drops the target's
  values: its storage is marked (``fake_values``), and reading it or anything computed from it
  raises. Nothing holds values that are not the program's.
What needs values a tensor lacks (``.item()``, printing, ``.cpu()``, ``.numpy()``,
data-dependent shapes such as ``nonzero`` or boolean masks) raises :class:`TimingOnlyError`.
"""
from __future__ import annotations

import contextlib

import torch

__all__ = ["TimingOnlyState", "STATE", "TimingOnlyError", "timing_only", "set_timing_only", "is_timing_only",
           "values_kept", "DEFAULT_VALUES_UP_TO", "host_device", "is_data_free", "has_data_free", "to_data_free", "no_values_error", "unify",
           "check_decomposable", "check_value_reader",
           "LEAVE_HINT"]

HOST = torch.device("cpu")
META = torch.device("meta")
LEAVE_HINT = ("leave timing-only mode (torch.neuron.set_timing_only(False), or run outside "
              "`with torch.neuron.timing_only():`) and create the tensors again to compute values")


# Masks and position ids of a batch (64 x 512 tokens: 32,768) keep values; weights, activations
# and images do not (a 768 x 768 weight has 589,824 elements).
DEFAULT_VALUES_UP_TO = 65536


class TimingOnlyState:
    """Whether new device tensors are born without values, process-wide. ``enabled`` is a
    plain attribute because the factories read it on every allocation."""

    __slots__ = ("enabled", "ever_enabled", "values_up_to", "kept_tensors", "kept_bytes", "valued_ops")

    def __init__(self) -> None:
        self.enabled = False
        # Whether data-free tensors may exist: until then the device skips the per-op check
        # for a mix of tensors with and without values (host kernels do not all reject a mix).
        self.ever_enabled = False
        self.values_up_to = DEFAULT_VALUES_UP_TO   # elements a new tensor may have and keep values
        # Counted while the mode is on: tensors born with values, their bytes, and ops that
        # computed values on the host.
        self.kept_tensors = self.kept_bytes = self.valued_ops = 0

    def set(self, enabled: bool, values_up_to: int | None = None) -> None:
        if values_up_to is not None:
            if isinstance(values_up_to, bool) or not isinstance(values_up_to, int) or values_up_to < 0:
                raise ValueError(f"values_up_to must be a number of elements >= 0, got {values_up_to!r}")
            self.values_up_to = values_up_to
        self.enabled = bool(enabled)
        self.ever_enabled = self.ever_enabled or self.enabled

    def reset(self) -> None:
        self.__init__()


STATE = TimingOnlyState()


class TimingOnlyError(RuntimeError):
    """An operation needed the values of a tensor created in timing-only mode."""


def set_timing_only(enabled: bool = True, *, values_up_to: int | None = None) -> None:
    """Make new device tensors data-free (True) or hold host values again (False).

    ``values_up_to``: new tensors of at most this many elements keep their values (masks,
    position ids, scalars; 0 keeps none); None leaves the limit as it is (65,536 at start).
    """
    STATE.set(enabled, values_up_to)


def is_timing_only() -> bool:
    return STATE.enabled


@contextlib.contextmanager
def timing_only(enabled: bool = True, *, values_up_to: int | None = None):
    """``with torch.neuron.timing_only():`` tensors (and parameters) made inside hold no values,
    except small ones (at most ``values_up_to`` elements, see :func:`set_timing_only`)."""
    previous = STATE.enabled, STATE.values_up_to
    STATE.set(enabled, values_up_to)
    try:
        yield
    finally:
        STATE.set(*previous)


def values_kept() -> dict:
    """What kept values while the mode was on: ``tensors`` born with values (and their
    ``bytes``), ``ops`` that computed values on the host. Counts since the process started."""
    return {"tensors": STATE.kept_tensors, "bytes": STATE.kept_bytes, "ops": STATE.valued_ops}


def host_device(host_inputs=(), numel: int | None = None, itemsize: int = 0) -> torch.device:
    """Where the host side of a new device tensor of ``numel`` elements lives: ``meta`` when it is
    computed from data-free tensors, or in the mode unless it is small (None: its size is not
    known, so it is not small); the CPU otherwise."""
    if has_data_free(host_inputs):
        return META
    if STATE.enabled:
        if numel is None or numel > STATE.values_up_to:
            return META
        STATE.kept_tensors += 1
        STATE.kept_bytes += numel * itemsize
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
    """The host arguments with every tensor data-free if any of them is, else as they were;
    and the arguments ``func`` writes that hold values and so lose them: (argument, its
    data-free twin the op writes instead) pairs.

    Host kernels do not all reject a mix of meta and CPU tensors (a CPU ``mm`` reads a meta
    operand's missing data), so a mix never reaches them: an input made with values before the
    mode meets data-free weights as its data-free twin. A written argument with values gets
    no values from a data-free result: the caller marks it as holding none
    (``fake_values.drop``).
    """
    tensors = list(_flat_tensors((*host_args, *host_kwargs.values())))
    metas = sum(t.is_meta for t in tensors)
    if metas == 0:
        if STATE.enabled and tensors:
            STATE.valued_ops += 1
        return host_args, host_kwargs, ()
    if metas == len(tensors):
        return host_args, host_kwargs, ()
    free_args, free_kwargs = to_data_free(host_args), {k: to_data_free(v) for k, v in host_kwargs.items()}
    losing = []
    for i, name in _written(func):
        target, twin = (host_args[i], free_args[i]) if i < len(host_args) else \
            (host_kwargs.get(name), free_kwargs.get(name))
        losing += [(t, w) for t, w in zip(_flat_tensors((target,)), _flat_tensors((twin,))) if not t.is_meta]
    return free_args, free_kwargs, losing


def _flat_tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif v.__class__ in (list, tuple):
            yield from _flat_tensors(v)
