"""torch.save / torch.load for device tensors, honouring ``map_location`` like CUDA does.

A device tensor pickles as a host copy whose storage is tagged with the device ("neuron:0"),
so ``torch.load`` decides where it lands: ``map_location="cpu"`` gives CPU tensors, none (or
"neuron") gives device tensors. PyTorch's own PrivateUse1 deserializer would copy the storage
through a device allocator this Python backend does not have (a segfault), and a wrapper's
placeholder storage refuses ``data_ptr()`` (which torch.load reads), so a device location is
restored as the host storage plus a note of the device; the rebuild step moves it there.
Limit: a file saved from plain CPU tensors rebuilds through PyTorch's own ``_rebuild_tensor_v2``,
which this backend cannot intercept, so ``map_location="neuron"`` leaves those on the CPU;
call ``.to("neuron")`` after loading.
"""
from __future__ import annotations

import re
import weakref

import torch

__all__ = ["register_serialization", "mark_for_saving", "device_restored_for", "SIMULATED_LOCATION"]

SIMULATED_LOCATION = re.compile(r"^(neuron|cuda)(:\d+)?$")
_saving: dict = {}      # data_ptr of a host storage being saved -> device
_restored: dict = {}    # data_ptr of a host storage just loaded -> device it was mapped to
_done = False


def mark_for_saving(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Tag ``host``'s storage with ``device`` for the pickler; dropped when ``host`` dies."""
    key = host.untyped_storage().data_ptr()
    _saving[key] = str(device)
    weakref.finalize(host, _saving.pop, key, None)
    return host


def device_restored_for(host: torch.Tensor) -> torch.device | None:
    """The device torch.load mapped ``host``'s storage to, if it is a simulated one."""
    return _restored.pop(host.untyped_storage().data_ptr(), None) if _restored else None


def _tag(storage):
    if storage.device.type == "cpu" and _saving:
        return _saving.get(storage.data_ptr())
    return None


def _restore(storage, location: str):
    from .dispatch import SIMULATED_DEVICE_TYPES

    if not SIMULATED_LOCATION.match(location) or location.split(":")[0] not in SIMULATED_DEVICE_TYPES:
        return None
    device = torch.device(location)
    host = storage if storage.device.type == "cpu" else storage.cpu()
    key = host.data_ptr()
    _restored[key] = device if device.index is not None else torch.device(device.type, 0)
    weakref.finalize(host, _restored.pop, key, None)   # never outlive the storage it describes
    return host


def register_serialization() -> None:
    """Hook the device into torch.serialization's location registry. Idempotent."""
    global _done
    if not _done:
        # Before the CPU tagger (10) and the PrivateUse1 deserializer (23).
        torch.serialization.register_package(5, _tag, _restore)
        _done = True
