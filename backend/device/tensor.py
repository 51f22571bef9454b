"""The tensor type behind the simulated devices.

A ``DeviceTensor`` is a wrapper subclass: PyTorch sees a tensor whose device is ``neuron:0``
(or ``cuda:0`` under CUDA emulation); its values live in exactly one host tensor, ``_inner``,
so a model on the device holds no shadow copy. Views wrap host views of the same storage, so
aliasing (a write through a view seen by the base) is PyTorch's own.
"""
from __future__ import annotations

import copy

import torch

from . import fake_values
from .device_module import check_device
from .freed_storage import freed_storage_error
from .memory import POOLS
from .serialization import device_restored_for, mark_for_saving, register_serialization
from .state import STATE
from .timing_only import no_values_error

__all__ = ["DeviceTensor", "DeviceStorage", "wrap", "unwrap_to_host", "carry_math_bits"]


# PyTorch answers .layout of a wrapper subclass only for strided and COO tensors.
_COMPRESSED_LAYOUTS = frozenset({torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc})


class DeviceTensor(torch.Tensor):
    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device, requires_grad: bool = False):
        layout = inner.layout
        if layout is torch.strided:
            out = torch.Tensor._make_wrapper_subclass(
                cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(),
                dtype=inner.dtype, layout=layout, device=device, requires_grad=requires_grad)
        elif layout in _COMPRESSED_LAYOUTS:
            raise RuntimeError(
                f"{layout} tensors are not supported on the {device.type} device: a "
                f"wrapper tensor cannot carry a compressed sparse layout (use to_sparse() for COO)")
        else:   # sparse COO: no strides or offset
            out = torch.Tensor._make_wrapper_subclass(
                cls, inner.size(), dtype=inner.dtype, layout=layout, device=device, requires_grad=requires_grad)
        out._inner = inner
        return out

    # Only __torch_dispatch__ matters; skipping the __torch_function__ layer halves per-op cost.
    __torch_function__ = torch._C._disabled_torch_function_impl

    # __torch_dispatch__ is installed by ``backend.device.dispatch`` when it is imported (the
    # package imports it first): dispatch builds DeviceTensors, so it sits above this module.

    # Traceable-subclass protocol: lets Dynamo/AOTAutograd see through the wrapper.
    def __tensor_flatten__(self):
        return ["_inner"], self.device

    @staticmethod
    def __tensor_unflatten__(inner_tensors, device, outer_size, outer_stride):
        return carry_math_bits(DeviceTensor(inner_tensors["_inner"], device))

    def __repr__(self, *, tensor_contents=None) -> str:
        if self._inner.__class__ is not torch.Tensor:
            # A tracer's placeholder (torch.compile): it has no values to print.
            return f"DeviceTensor(<{type(self._inner).__name__}>, size={tuple(self.shape)}, device='{self.device}')"
        if self._inner.is_meta:
            # Debuggers, tracebacks and containers call repr: say what it is, show no values.
            return (f"tensor(<no values: timing-only>, size={tuple(self.shape)}, device='{self.device}', "
                    f"dtype={self.dtype})")
        source = fake_values.origin(self._inner) if fake_values.STATE.any else None
        if source is not None:
            return (f"tensor(<no values: written by {source}>, size={tuple(self.shape)}, "
                    f"device='{self.device}', dtype={self.dtype})")
        freed = STATE.freed.shortfall(self._inner) if STATE.freed.any else None
        if freed is not None:
            return (f"tensor(<storage freed: resized to {freed[0]} bytes>, size={tuple(self.shape)}, "
                    f"device='{self.device}', dtype={self.dtype})")
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

    def __str__(self) -> str:
        if self._inner.is_meta:
            raise no_values_error("printing a tensor")
        source = fake_values.origin(self._inner) if fake_values.STATE.any else None
        if source is not None:
            raise fake_values.error("printing a tensor", source)
        freed = STATE.freed.shortfall(self._inner) if STATE.freed.any else None
        if freed is not None:
            raise freed_storage_error("printing a tensor", self.device, *freed)
        return self.__repr__()

    def untyped_storage(self) -> DeviceStorage:
        # The placeholder storage, made resizable the way FSDP2 resizes parameter storages.
        storage = super().untyped_storage()
        if storage.__class__ is not DeviceStorage:
            # PyTorch keeps one Python object per storage while the storage lives, so the class
            # and the host link set here last as long as the placeholder.
            storage.__class__ = DeviceStorage
        storage._host = self._inner
        return storage

    def data_ptr(self) -> int:
        # The address of the host bytes the values live in (the placeholder has none), so code
        # that finds shared storages by address (safetensors, save_pretrained) sees what CPU
        # would. A timing-only tensor has no bytes: 0 would read as "no storage" and make every
        # one look shared, so it raises; a tracer's placeholder answers as PyTorch does.
        inner = self._inner
        if inner.is_meta:
            raise no_values_error("Tensor.data_ptr()")
        if inner.__class__ is not torch.Tensor:
            return super().data_ptr()
        return inner.data_ptr()

    def __deepcopy__(self, memo):
        # PyTorch deep-copies a tensor whose data_ptr() is nonzero byte for byte through its
        # storage; this placeholder storage holds no bytes (they live in ``_inner``), so copy as
        # PyTorch does for storage-less backends (XLA, lazy): clone the values.
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            return torch.Tensor.__deepcopy__(self, memo)     # PyTorch's own error for non-leaves
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_()
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        new.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items() if k != "_inner"})
        memo[id(self)] = new
        return new

    def __format__(self, format_spec: str) -> str:
        # As torch.Tensor formats a 0-dim CPU/CUDA tensor: as its number (f"{loss:.4f}").
        if self.dim() == 0 and self._inner.__class__ is torch.Tensor:
            if self._inner.is_meta:
                raise no_values_error("formatting a tensor's value (f\"{t:.4f}\")")
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def tolist(self):
        return self.cpu().tolist()

    def numpy(self, *, force: bool = False):
        if not force:
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                f"copy the tensor to host memory first.")
        return self.detach().cpu().numpy()

    def __reduce_ex__(self, protocol):
        # Serialize the host values plus the device string, never the (empty) wrapper storage.
        # The host copy's storage is tagged with the device, so torch.load's map_location applies.
        if self._inner.is_meta:
            raise no_values_error("saving or pickling a tensor")
        host = mark_for_saving(self._inner.detach().clone(), self.device)
        return (_rebuild_tagged_tensor, (host, self.requires_grad, getattr(self, "_is_param", False)))


_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_PRIVATEUSE1 = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
# The traceable storage resize (Dynamo's, for FSDP2); its PrivateUse1 kernel calls the hook.
_RESIZE_STORAGE_BYTES = torch.ops.inductor.resize_storage_bytes_.default


class DeviceStorage(torch.UntypedStorage):
    """The storage of a device tensor: a data-less placeholder (the values live in the host
    tensor ``_host``) whose ``resize_`` works as on CUDA, where FSDP2 frees and re-allocates
    unsharded parameters with ``untyped_storage().resize_(0)`` / ``resize_(nbytes)``.

    PyTorch refuses ``resize_`` on a placeholder of nonzero size before any device code runs,
    so the resize is done here: the placeholder takes the new size through the device's C++
    storage hook, and the memory books re-book the bytes. The host storage only ever grows
    (a CPU kernel on a 0-byte storage segfaults); the bytes given up are booked in
    ``STATE.freed``, so dispatch refuses to read them, as a real allocator hands back no freed
    data. FSDP2 re-allocates, then overwrites the bytes with its all-gather before reading them.
    """

    _host: torch.Tensor

    def _host_storage(self) -> torch.UntypedStorage | None:
        """The host storage holding the values, or None where there is none (a tracer's
        placeholder, a timing-only tensor)."""
        host = self._host
        if host.__class__ is not torch.Tensor or host.is_meta:
            return None
        return host.untyped_storage()

    def data_ptr(self) -> int:
        """The host storage's address: unique among live storages and stable until a resize,
        as a CUDA storage's; 0 once ``resize_(0)`` freed it, as on CUDA."""
        storage = self._host_storage()
        if storage is None:
            return super().data_ptr()
        return storage.data_ptr() if self.nbytes() else 0

    def nbytes(self) -> int:
        """The bytes allocated to the storage: the host storage's (every view of a tensor
        reports its base's, as on CPU), less what ``resize_`` freed."""
        storage = self._host_storage()
        if storage is None:
            return super().nbytes()
        allocated = STATE.freed.allocated(storage)
        return storage.nbytes() if allocated is None else allocated

    def resize_(self, size: int) -> DeviceStorage:
        size = int(size)
        if self.device.type != torch._C._get_privateuse1_backend_name():
            raise RuntimeError(
                f"resize_() of a {self.device.type} tensor's storage is not supported on the "
                f"simulated device; resize the tensor instead (t.resize_(...))")
        host = self._host
        pool = POOLS.for_device(self.device)
        if pool is not None and host.__class__ is torch.Tensor:
            pool.resize(host, size)
        if size > host.untyped_storage().nbytes():
            host.untyped_storage().resize_(size)
        if host.__class__ is torch.Tensor:
            STATE.freed.note_resize(host.untyped_storage(), size)
        # A throwaway wrapper sharing this placeholder carries it to the C++ hook.
        alias = DeviceTensor(torch.empty(0, dtype=torch.uint8), self.device)
        _SET_STORAGE.redispatch(_META, alias, self, 0, [0], [1])
        _RESIZE_STORAGE_BYTES.redispatch(_PRIVATEUSE1, alias, size)
        return self


def carry_math_bits(wrapper: DeviceTensor) -> DeviceTensor:
    """Mirror the host tensor's conj/neg bits on the wrapper (only views can acquire them).

    Inside __torch_dispatch__ the Conjugate/Negative keys are excluded, so host kernels would
    silently ignore an inner conj/neg bit. Mirrored on the wrapper, PyTorch's own fallbacks
    resolve the bit before the op reaches the device, and bit-aware kernels (copy_, clone,
    views, mm) read it from the inner exactly as they do on CPU.
    """
    inner = wrapper._inner
    if inner.is_conj() or inner.is_neg():
        torch._C._set_conj(wrapper, inner.is_conj())
        torch._C._set_neg(wrapper, inner.is_neg())
    return wrapper


def _rebuild_device_tensor(host: torch.Tensor, device: str, requires_grad: bool = False):
    # Files written before storages were tagged with their device.
    return host.to(device).requires_grad_(requires_grad)


def _rebuild_tagged_tensor(tensor: torch.Tensor, requires_grad: bool = False, is_param: bool = False):
    device = device_restored_for(tensor)
    if device is not None:
        tensor = tensor.to(device)
    if is_param:   # a device nn.Parameter pickles through here, not through Parameter's reduce
        return torch.nn.Parameter(tensor, requires_grad)
    return tensor.requires_grad_(requires_grad)


def wrap(inner: torch.Tensor, device: torch.device) -> DeviceTensor:
    """The device tensor on ``device`` holding ``inner``'s values (every device tensor is
    made here: factories, ``.to``, op outputs); raises for a device that does not exist."""
    if device.index:   # None and 0 always exist; only other ordinals need the device count
        check_device(device)
    out = DeviceTensor(inner, device)
    pool = POOLS.for_device(device)
    if pool is not None:
        pool.track(inner)
    return out


def unwrap_to_host(t: torch.Tensor) -> torch.Tensor:
    """The host tensor holding a device tensor's values (the tensor itself if on CPU)."""
    return t._inner if isinstance(t, DeviceTensor) else t


torch.serialization.add_safe_globals([_rebuild_device_tensor, _rebuild_tagged_tensor])
register_serialization()
