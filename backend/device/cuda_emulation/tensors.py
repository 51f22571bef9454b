"""Tensors of the emulated device: how "cuda" requests become device tensors.

Every emulated CUDA tensor is a ``DeviceTensor`` whose C++ device is the neuron device
(PrivateUse1). It cannot be a C++ CUDA tensor: on a CPU-only build ``at::getAccelerator()`` is
never CUDA, so the autograd engine finds no stream for CUDA nodes and fails every backward
(engine.cpp: ``opt_ready_stream && opt_parent_stream``). Instead:

- ``Tensor.to`` / ``Tensor.cuda`` send "cuda" requests to the backing device, so a tensor
  already there comes back as itself (``x.to("cuda") is x``) and modules keep their parameters;
- factory calls (``torch.zeros(..., device="cuda")``) reach the CUDA allocators registered for
  emulation, and ``DeviceTensor`` built for a cuda device is built on the backing device;
- in emulation (not redirect) ``DeviceTensor.device`` reports ``cuda:0`` and ``is_cuda`` True.
"""
from __future__ import annotations

import torch

from ..tensor import DeviceTensor
from ..patching import Patcher

__all__ = ["install"]

_to = torch._C.TensorBase.to


def _is_cuda(value) -> bool:
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return isinstance(value, torch.device) and value.type == "cuda"


def _check_ordinal(value) -> None:
    index = torch.device(value).index if not isinstance(value, int) else value
    if index not in (None, 0):
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (the emulated machine has one GPU, cuda:0)")


def install(patcher: Patcher, backing: torch.device, reported: torch.device) -> None:
    """Route "cuda" to ``backing`` (neuron:0); make device tensors report ``reported``."""

    def to(self, *args, **kwargs):
        if args and _is_cuda(args[0]):
            _check_ordinal(args[0])
            args = (backing, *args[1:])
        device = kwargs.get("device")
        if device is not None and _is_cuda(device):
            _check_ordinal(device)
            kwargs["device"] = backing
        return _to(self, *args, **kwargs)

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        if device is not None:
            _check_ordinal(device)
        return _to(self, backing, non_blocking=non_blocking, memory_format=memory_format)

    original_new = vars(DeviceTensor)["__new__"].__func__

    def new(cls, inner, device, requires_grad=False):
        # Wrappers are re-made with the device they report (dispatch, unflatten, factories);
        # a cuda one is built on the backing device.
        if _is_cuda(device):
            device = backing
        return original_new(cls, inner, device, requires_grad)

    to.__doc__ = _to.__doc__
    patcher.setattr(torch.Tensor, "to", to)
    patcher.setattr(torch.Tensor, "cuda", cuda)
    patcher.setattr(DeviceTensor, "__new__", staticmethod(new))
    if reported.type == "cuda":
        patcher.setattr(DeviceTensor, "device", property(lambda self: reported))
        patcher.setattr(DeviceTensor, "is_cuda", property(lambda self: True))
