"""torch.save / torch.load for device tensors, honouring ``map_location`` like CUDA does.

A device tensor pickles as a host copy whose storage is tagged with the device ("neuron:0"),
so ``torch.load`` decides where it lands: ``map_location="cpu"`` gives CPU tensors, none (or
"neuron") gives device tensors. PyTorch's own PrivateUse1 deserializer would copy the storage
through a device allocator this Python backend does not have (a segfault), and a wrapper's
placeholder storage refuses ``data_ptr()`` (which torch.load reads), so a device location is
restored as the host storage plus a note of the device. Every tensor PyTorch rebuilds over such
a storage (``torch._utils._rebuild_tensor_v2``, wrapped here, is what a file of CPU tensors
names, and what the host copy of a device tensor is rebuilt with) is then moved there: the
storage is moved once and each tensor becomes a view of it, so tensors that shared a storage
in the file share one on the device.
"""
from __future__ import annotations

import functools
import re
import weakref

import torch

from backend.recording import SIMULATED_DEVICE_TYPES

from .state import STATE

__all__ = ["register_serialization", "mark_for_saving", "device_restored_for", "SIMULATED_LOCATION"]

SIMULATED_LOCATION = re.compile(r"^(neuron|cuda)(:\d+)?$")


def mark_for_saving(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Tag ``host``'s storage with ``device`` for the pickler; dropped when ``host`` dies."""
    key = host.untyped_storage().data_ptr()
    STATE.saving[key] = str(device)
    weakref.finalize(host, STATE.saving.pop, key, None)
    return host


def device_restored_for(host: torch.Tensor) -> torch.device | None:
    """The device torch.load mapped ``host``'s storage to, if it is a simulated one."""
    if not STATE.restored or host.device.type != "cpu":
        return None
    return STATE.restored.get(host.untyped_storage().data_ptr())


def _on_restored_device(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (just rebuilt on the host) on the device its storage was mapped to."""
    device = device_restored_for(tensor)
    if device is None:
        return tensor
    storage = tensor.untyped_storage()
    key = (storage.data_ptr(), tensor.dtype)
    whole = STATE.moved.get(key)
    if whole is None:
        flat = torch.empty(0, dtype=tensor.dtype).set_(storage)
        whole = STATE.moved[key] = flat.to(device)
    moved = whole.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    return moved.requires_grad_(tensor.requires_grad)


def _wrap_rebuild(rebuild):
    @functools.wraps(rebuild)   # same module and name: pickles and allow-lists as PyTorch's own
    def rebuild_on_restored_device(*args, **kwargs):
        return _on_restored_device(rebuild(*args, **kwargs))

    rebuild_on_restored_device.__wrapped_for_devices__ = True
    return rebuild_on_restored_device


def _tag(storage):
    if storage.device.type == "cpu" and STATE.saving:
        return STATE.saving.get(storage.data_ptr())
    return None


def _restore(storage, location: str):
    if not SIMULATED_LOCATION.match(location) or location.split(":")[0] not in SIMULATED_DEVICE_TYPES:
        return None
    device = torch.device(location)
    host = storage if storage.device.type == "cpu" else storage.cpu()
    key = host.data_ptr()
    STATE.restored[key] = device if device.index is not None else torch.device(device.type, 0)
    weakref.finalize(host, _forget, key)   # never outlive the storage it describes
    return host


def _forget(key: int) -> None:
    STATE.restored.pop(key, None)
    for moved in [k for k in STATE.moved if k[0] == key]:
        del STATE.moved[moved]


def register_serialization() -> None:
    """Hook the device into torch.serialization's location registry. Idempotent."""
    if not STATE.serialization_registered:
        # Before the CPU tagger (10) and the PrivateUse1 deserializer (23).
        torch.serialization.register_package(5, _tag, _restore)
        if not getattr(torch._utils._rebuild_tensor_v2, "__wrapped_for_devices__", False):
            torch._utils._rebuild_tensor_v2 = _wrap_rebuild(torch._utils._rebuild_tensor_v2)
        STATE.serialization_registered = True
