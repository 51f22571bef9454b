"""Tensors of the emulated device: how "cuda" requests become device tensors.

Every emulated CUDA tensor is a ``DeviceTensor`` whose C++ device is the neuron device
(PrivateUse1). It cannot be a C++ CUDA tensor: on a CPU-only build ``at::getAccelerator()`` is
never CUDA, so the autograd engine finds no stream for CUDA nodes and fails every backward
(engine.cpp: ``opt_ready_stream && opt_parent_stream``). Instead:

- ``Tensor.to`` / ``Tensor.cuda`` send "cuda" requests to the backing device, so a tensor
  already there comes back as itself (``x.to("cuda") is x``) and modules keep their parameters;
- factory calls (``torch.zeros(..., device="cuda")``) reach the CUDA allocators registered for
  emulation, and ``DeviceTensor`` built for a cuda device is built on the backing device;
- in emulation (not redirect) every device tensor made while emulation is on reports
  ``cuda:0`` and ``is_cuda`` True (C++ names the backing device for emulated tensors, e.g. in
  ``at::empty(options)`` or a grouped ``x.device``, so neuron:0 there means the emulated GPU);
  neuron tensors made before emulation keep reporting ``neuron:0`` (``.cuda()`` copies them),
  so an op mixing the two raises PyTorch's "Expected all tensors to be on the same device".
"""
from __future__ import annotations

import torch

from ..device_module import REPORTED_AS, check_device
from ..tensor import DeviceTensor
from ..patching import Patcher

__all__ = ["install"]

_to = torch._C.TensorBase.to


def _is_cuda(value) -> bool:
    if value.__class__ is int:   # a bare ordinal names the current accelerator: the emulated GPU
        return True
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return isinstance(value, torch.device) and value.type == "cuda"


def _names_backing(value, backing: torch.device) -> bool:
    """Whether the user asked for the backing device itself: ``"neuron"``, ``"neuron:0"`` or
    ``torch.device("neuron")``. ``torch.device("neuron", 0)`` is also what this module passes on
    for a cuda request (re-entering ``to`` through a default-device mode), so it is not."""
    if isinstance(value, str):
        return value.split(":")[0] == backing.type
    return isinstance(value, torch.device) and value.type == backing.type and value.index is None


def _check_ordinal(value) -> None:
    check_device(torch.device("cuda", value) if isinstance(value, int) else torch.device(value))


def _bare_ordinals_as_cuda(parse_to):
    """``Module.to(1)`` parses its arguments with ``torch._C._nn._parse_to``, which maps a bare
    ordinal to the C++ accelerator (neuron); under emulation the accelerator is the GPU."""
    def parse(*args, **kwargs):
        if args and args[0].__class__ is int:
            args = (torch.device("cuda", args[0]), *args[1:])
        if kwargs.get("device").__class__ is int:
            kwargs["device"] = torch.device("cuda", kwargs["device"])
        return parse_to(*args, **kwargs)

    return parse


def install(patcher: Patcher, backing: torch.device, reported: torch.device) -> None:
    """Route "cuda" (and bare ordinals, while emulating) to ``backing`` (neuron:0); make device
    tensors report ``reported``."""
    emulating = reported.type == "cuda"

    def to(self, *args, **kwargs):
        requested = kwargs.get("device", args[0] if args else None)
        if args and _is_cuda(args[0]):
            _check_ordinal(args[0])
            args = (backing, *args[1:])
        device = kwargs.get("device")
        if device is not None and _is_cuda(device):
            _check_ordinal(device)
            kwargs["device"] = backing
        out = _to(self, *args, **kwargs)
        if emulating and (_is_cuda(requested) or _names_backing(requested, backing)):
            return _reporting(out, self, args, kwargs, cuda=_is_cuda(requested))
        return out

    def _reporting(out, source, args, kwargs, cuda: bool = True):
        # A neuron tensor and an emulated cuda tensor are one C++ device, so C++ hands back
        # ``source`` for a move between them: make that move a copy reporting the device asked for.
        if out.__class__ is not DeviceTensor or out._reports_cuda == cuda:
            return out
        if out is source:
            out = _to(source, *args, **{**kwargs, "copy": True})
        out._reports_cuda = cuda
        return out

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        if device is not None:
            _check_ordinal(device)
        out = _to(self, backing, non_blocking=non_blocking, memory_format=memory_format)
        return _reporting(out, self, (backing,), {"non_blocking": non_blocking,
                                                  "memory_format": memory_format}) if emulating else out

    original_new = vars(DeviceTensor)["__new__"].__func__

    def new(cls, inner, device, requires_grad=False):
        # Wrappers are re-made with the device they report (dispatch, unflatten, factories);
        # a cuda one is built on the backing device.
        cuda = _is_cuda(device)
        out = original_new(cls, inner, backing if cuda else device, requires_grad)
        if cuda:
            out._reports_cuda = True
        return out

    to.__doc__ = _to.__doc__
    patcher.setattr(torch.Tensor, "to", to)
    if emulating:
        patcher.setattr(torch._C._nn, "_parse_to", _bare_ordinals_as_cuda(torch._C._nn._parse_to))
    patcher.setattr(torch.Tensor, "cuda", cuda)
    patcher.setattr(DeviceTensor, "__new__", staticmethod(new))
    if emulating:
        # C++ allocates on the backing device for emulated tensors (``at::empty(options)``),
        # so while emulating, an allocation there is an emulated-cuda tensor.
        patcher.setitem(REPORTED_AS, backing.type, reported, "REPORTED_AS")
        patcher.setattr(DeviceTensor, "_reports_cuda", False)
        patcher.setattr(DeviceTensor, "device", property(
            lambda self: reported if self._reports_cuda else backing))
        patcher.setattr(DeviceTensor, "is_cuda", property(lambda self: self._reports_cuda))
