"""``param.data = tensor`` for device tensors, as it works between CPU and CUDA tensors.

PyTorch's ``set_data`` swaps the values under a tensor while keeping the tensor object (its
identity, ``requires_grad``, hooks and attributes); FSDP2 moves a CPU-built model to its device
that way (``tensor.data = tensor.to(device)``). A device tensor is a Python wrapper whose values
live in its host tensor ``_inner``, so ``set_data`` refuses to mix it with a plain tensor
("incompatible tensor type"), and between two device tensors it would change the wrapper's
geometry but leave ``_inner`` (the values) as they were: silently wrong. The setter installed
on ``torch.Tensor.data`` does both cases the way the values are kept here:

- device tensor onto device tensor: the wrapper takes the new host tensor (sharing its values,
  as ``set_data`` shares storage), then PyTorch's ``set_data`` updates the geometry;
- across the host/device boundary: the tensor object is swapped (``torch.utils.swap_tensors``,
  as ``nn.Module.to`` does for wrapper subclasses) with an alias of the new values of the same
  kind (``nn.Parameter`` for a parameter), keeping its own attributes and ``requires_grad``.
"""
from __future__ import annotations

import torch

from .tensor import DeviceTensor

__all__ = ["install_data_setter"]

_DATA = torch._C.TensorBase.data


def _data_set(self, new) -> None:
    self_on_device, new_on_device = isinstance(self, DeviceTensor), isinstance(new, DeviceTensor)
    if not (self_on_device or new_on_device) or not isinstance(new, torch.Tensor):
        _DATA.__set__(self, new)
    elif self_on_device and new_on_device:
        self._inner = new._inner
        _DATA.__set__(self, new)
    else:
        _swap_data(self, new)


def _swap_data(self: torch.Tensor, new: torch.Tensor) -> None:
    attributes = {k: v for k, v in vars(self).items() if k not in ("_inner", "_is_param")}
    is_param = isinstance(self, torch.nn.Parameter)
    with torch.no_grad():
        alias = new.detach()
        alias = torch.nn.Parameter(alias, self.requires_grad) if is_param else alias.requires_grad_(self.requires_grad)
    try:
        torch.utils.swap_tensors(self, alias)
    except RuntimeError as error:
        raise RuntimeError(
            f"Attempted to set .data of a {self.device} tensor to a {new.device} tensor: this "
            f"replaces the tensor object underneath, which needs no other references to it "
            f"(a pending autograd graph or a weakref holds one: {error}). Move it before using "
            f"it, or with module.to(device).") from None
    vars(self).update(attributes)


def install_data_setter() -> None:
    """Route ``tensor.data = value`` through the device-aware setter. Idempotent."""
    if not isinstance(vars(torch.Tensor).get("data"), property):
        # The getter is PyTorch's own descriptor, so reading .data adds no Python frame.
        torch.Tensor.data = property(_DATA.__get__, _data_set, doc=_DATA.__doc__)


# Installed on import, as ``dispatch`` installs DeviceTensor.__torch_dispatch__.
install_data_setter()
