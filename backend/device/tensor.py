"""The tensor type behind the simulated devices.

A ``DeviceTensor`` is a wrapper subclass: PyTorch sees a tensor whose device is ``neuron:0``
(or ``cuda:0`` under CUDA emulation); its values live in exactly one host tensor, ``_inner``,
so a model on the device holds no shadow copy. Views wrap host views of the same storage, so
aliasing (a write through a view seen by the base) is PyTorch's own.
"""
from __future__ import annotations

import torch

__all__ = ["DeviceTensor", "wrap", "unwrap_to_host"]


class DeviceTensor(torch.Tensor):
    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device, requires_grad: bool = False):
        out = torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, layout=inner.layout, device=device, requires_grad=requires_grad)
        out._inner = inner
        return out

    # Only __torch_dispatch__ matters; skipping the __torch_function__ layer halves per-op cost.
    __torch_function__ = torch._C._disabled_torch_function_impl

    # Dispatch lives in its own module; bound here so PyTorch finds it on the class.
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    # Traceable-subclass protocol: lets Dynamo/AOTAutograd see through the wrapper.
    def __tensor_flatten__(self):
        return ["_inner"], self.device

    @staticmethod
    def __tensor_unflatten__(inner_tensors, device, outer_size, outer_stride):
        return DeviceTensor(inner_tensors["_inner"], device)

    def __repr__(self, *, tensor_contents=None) -> str:
        if self._inner.__class__ is not torch.Tensor:
            # A tracer's placeholder (torch.compile): it has no values to print.
            return f"DeviceTensor(<{type(self._inner).__name__}>, size={tuple(self.shape)}, device='{self.device}')"
        inner = self._inner.detach()
        body = torch._tensor_str._tensor_str(inner, indent=len("tensor(")) if inner.numel() else "[]"
        parts = [body, f"device='{self.device}'"]
        if inner.numel() == 0 and inner.dim() != 1:
            parts.append(f"size={tuple(inner.shape)}")
        if self.dtype not in (torch.get_default_dtype(), torch.int64, torch.bool):
            parts.append(f"dtype={self.dtype}")
        if self.grad_fn is not None:
            parts.append(f"grad_fn=<{type(self.grad_fn).__name__}>")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return "tensor(" + ", ".join(parts) + ")"

    def __reduce_ex__(self, protocol):
        # Serialize the host values plus the device string, never the (empty) wrapper storage.
        return (_rebuild_device_tensor, (self._inner.detach().clone(), str(self.device), self.requires_grad))


def _rebuild_device_tensor(host: torch.Tensor, device: str, requires_grad: bool = False):
    return host.to(device).requires_grad_(requires_grad)


def wrap(inner: torch.Tensor, device: torch.device) -> DeviceTensor:
    """The device tensor on ``device`` holding ``inner``'s values (every device tensor is
    made here: factories, ``.to``, op outputs); raises for a device that does not exist."""
    if device.index:   # None and 0 always exist; only other ordinals need the device count
        check_device(device)
    out = DeviceTensor(inner, device)
    pool = POOLS.get(device.type)
    if pool is not None:
        pool.track(inner)
    return out


def unwrap_to_host(t: torch.Tensor) -> torch.Tensor:
    """The host tensor holding a device tensor's values (the tensor itself if on CPU)."""
    return t._inner if isinstance(t, DeviceTensor) else t


from .dispatch import dispatch as _dispatch  # noqa: E402  (dispatch imports DeviceTensor)
from .device_module import check_device  # noqa: E402
from .memory import POOLS  # noqa: E402

torch.serialization.add_safe_globals([_rebuild_device_tensor])
