"""Pinned host memory for the simulated devices: ``Tensor.pin_memory()`` and
``DataLoader(pin_memory=True)``.

PyTorch pins through ``PrivateUse1HooksInterface::getPinnedMemoryAllocator``, a C++ hook the
Python-registered hooks cannot provide, so ``pin_memory()`` raised NotImplementedError with
``neuron`` as the accelerator. The simulated devices copy from host memory either way (page-
locking buys nothing in a simulator), so pinning here is what PyTorch's own kernel does minus
the page-locking: a copy into fresh host storage, which ``is_pinned()`` then reports as pinned.
Both ops get CPU kernels that handle the simulated devices (and ``device=None`` once the
device is PyTorch's accelerator) and leave every other device to PyTorch's composite kernel.
"""
from __future__ import annotations

import weakref

import torch

from backend.recording import SIMULATED_DEVICE_TYPES

from .state import STATE

__all__ = ["register_pinned_memory"]

_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _for_simulated_device(device) -> bool:
    if device is None:
        accelerator = torch.accelerator.current_accelerator()
        return accelerator is not None and accelerator.type in SIMULATED_DEVICE_TYPES
    return torch.device(device).type in SIMULATED_DEVICE_TYPES


def _pin_memory(self: torch.Tensor, device=None) -> torch.Tensor:
    if not _for_simulated_device(device):
        return torch.ops.aten._pin_memory.default.redispatch(_COMPOSITE, self, device)
    pinned = torch.empty_strided(self.size(), self.stride(), dtype=self.dtype)
    pinned.copy_(self)
    storage = pinned.untyped_storage()
    key = storage.data_ptr()
    STATE.pinned.add(key)
    weakref.finalize(storage, STATE.pinned.discard, key)   # an address reused later is not pinned
    return pinned


def _is_pinned(self: torch.Tensor, device=None) -> bool:
    if not _for_simulated_device(device):
        return torch.ops.aten.is_pinned.default.redispatch(_COMPOSITE, self, device)
    return bool(STATE.pinned) and self.untyped_storage().data_ptr() in STATE.pinned


def register_pinned_memory() -> None:
    """Give ``aten::_pin_memory`` / ``aten::is_pinned`` their CPU kernels. Idempotent."""
    if STATE.pinned_library is None:
        library = torch.library.Library("aten", "IMPL")
        library.impl("_pin_memory", _pin_memory, "CPU")
        library.impl("is_pinned", _is_pinned, "CPU")
        STATE.pinned_library = library
