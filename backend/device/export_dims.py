"""Named ``torch.export.Dim``s on device tensors.

``torch.export`` sees a device tensor as a traceable wrapper subclass: the wrapper and its host
tensor (``_inner``) each get a size symbol. ``Dim.DYNAMIC``/``Dim.AUTO`` mark the dimension with
``torch._dynamo.mark_dynamic``, which also marks the inner tensor; a named ``Dim("b")`` only
records a constraint for the wrapper, so the host tensor's dimension stays static, the wrapper's
symbol is specialised to it ("you marked b as dynamic but your code specialized it"), and
marking the inner by hand makes export demand an equality the user cannot name ("the values of
L['x']._inner.size()[0] and b must always be equal").

Here, each named constraint on a device tensor's dimension also marks that dimension of the
host tensor dynamic and relaxed (exactly what ``Dim.DYNAMIC`` does to it): the host tensor's
symbol is then unified with ``b``, which keeps the name and the range the user gave.

Derived dims (``2 * b``) still fail: export accepts a host tensor's symbol equal to a named one
when the host source is relaxed, but checks a derived relation (``_inner.size()[0] = 2*b``)
against the user's equalities only, which can name top-level inputs, not ``_inner``.
"""
from __future__ import annotations

import sys

import torch
import torch.export.dynamic_shapes as dynamic_shapes
from torch.utils import _pytree as pytree

from .tensor import DeviceTensor

__all__ = ["install_export_dims"]

# Modules that import the function by name (torch.export's non-strict and strict tracers).
_IMPORTERS = ("torch._export.non_strict_utils", "torch.export._trace")


def _with_device_inners(process):
    def process_dynamic_shapes(combined_args, dynamic_shapes_spec, *args, **kwargs):
        constraints = process(combined_args, dynamic_shapes_spec, *args, **kwargs)
        devices = {id(t): t for t in pytree.tree_leaves(combined_args) if isinstance(t, DeviceTensor)}
        for constraint in list(constraints):
            tensor = devices.get(constraint.t_id)
            if tensor is None or isinstance(constraint, dynamic_shapes._RelaxedConstraint):
                continue
            torch._dynamo.mark_dynamic(tensor._inner, constraint.dim)
            constraints.append(dynamic_shapes._RelaxedConstraint(id(tensor._inner), constraint.dim))
        return constraints

    process_dynamic_shapes._device_inners = True
    return process_dynamic_shapes


def install_export_dims() -> None:
    """Wrap ``_process_dynamic_shapes`` where torch.export reads it. Idempotent."""
    original = dynamic_shapes._process_dynamic_shapes
    if getattr(original, "_device_inners", False):
        return
    patched = _with_device_inners(original)
    dynamic_shapes._process_dynamic_shapes = patched
    for name in _IMPORTERS:   # already imported: they hold the original by name
        module = sys.modules.get(name)
        if module is not None and getattr(module, "_process_dynamic_shapes", None) is original:
            module._process_dynamic_shapes = patched
