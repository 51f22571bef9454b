"""What the device layer has registered with PyTorch, and the bookkeeping its hooks keep.

One object, ``STATE``, so tests can see and clear it in one place. PyTorch registrations last
for the process and cannot be undone (the PrivateUse1 rename, ``torch.serialization``'s location
package, the wrapped ``_rebuild_tensor_v2``), so ``reset()`` leaves those flags and the
``torch.library`` handles that keep kernels registered alone (``unregister_factories`` drops a
dispatch key's allocators) and clears only the per-storage bookkeeping.
"""
from __future__ import annotations

from .freed_storage import FreedStorages

__all__ = ["DeviceLayerState", "STATE"]


class DeviceLayerState:
    """Registration flags, library handles and per-storage notes of the device layer."""

    __slots__ = ("registered", "serialization_registered", "pinned_library", "factory_libraries",
                 "pinned", "saving", "restored", "moved", "freed")

    def __init__(self) -> None:
        self.registered = False                 # torch.device("neuron") works (registration.register)
        self.serialization_registered = False   # torch.save/load hooks installed
        self.pinned_library = None              # torch.library.Library holding the pin_memory kernels
        self.factory_libraries: dict = {}       # dispatch key -> Library holding its allocators
        self.pinned: set[int] = set()           # data_ptrs of host storages pinned for a simulated device
        self.saving: dict = {}                  # data_ptr of a host storage being saved -> device
        self.restored: dict = {}                # data_ptr of a host storage just loaded -> its device
        self.moved: dict = {}                   # (data_ptr, dtype) of such a storage -> it on its device
        self.freed = FreedStorages()            # host storages untyped_storage().resize_() shrank

    def reset(self) -> None:
        """Forget the per-storage notes (tests). Registrations stay: PyTorch keeps them."""
        self.pinned.clear()
        self.saving.clear()
        self.restored.clear()
        self.moved.clear()
        self.freed.clear()


STATE = DeviceLayerState()
