"""Which host storages ``untyped_storage().resize_()`` has freed, so reads of them can raise.

FSDP2 frees unsharded parameters with ``resize_(0)`` and re-allocates them with
``resize_(nbytes)`` before its all-gather writes them. The host bytes are kept through the free
(a CPU kernel reading a 0-byte storage would crash the interpreter), so without this book a read
in between would silently return stale values; a real allocator never hands freed data back.
"""
from __future__ import annotations

import weakref

import torch

__all__ = ["FreedStorages", "freed_storage_error"]


class FreedStorages:
    """Host storages resized below their size, with the bytes that are still allocated."""

    __slots__ = ("_allocated", "any")

    def __init__(self) -> None:
        # Keyed by the storage object: PyTorch keeps one per storage while it lives.
        self._allocated: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.any = False    # dispatch's cheap test; may stay True after an entry's storage died

    def note_resize(self, host_storage: torch.UntypedStorage, nbytes: int) -> None:
        if nbytes < host_storage.nbytes():
            self._allocated[host_storage] = nbytes
        else:
            self._allocated.pop(host_storage, None)
        self.any = bool(self._allocated)

    def allocated(self, host_storage: torch.UntypedStorage) -> int | None:
        """The bytes still allocated to ``host_storage``, or None if it was never shrunk."""
        return self._allocated.get(host_storage) if self.any else None

    def shortfall(self, inner: torch.Tensor) -> tuple[int, int] | None:
        """(bytes allocated, bytes read) when reading ``inner`` goes past its storage's
        allocated bytes, else None."""
        if inner.__class__ is not torch.Tensor or inner.layout != torch.strided or inner.numel() == 0:
            return None     # tracer placeholders and sparse tensors have no storage of their own
        allocated = self._allocated.get(inner.untyped_storage())
        if allocated is None:
            return None
        last = inner.storage_offset() + sum((n - 1) * s for n, s in zip(inner.shape, inner.stride()))
        needed = (last + 1) * inner.element_size()
        return (allocated, needed) if needed > allocated else None

    def clear(self) -> None:
        self._allocated.clear()
        self.any = False


def freed_storage_error(what: str, device: torch.device, allocated: int, needed: int) -> RuntimeError:
    state = "freed (resized to 0)" if allocated == 0 else f"resized to {allocated} bytes"
    return RuntimeError(
        f"{what}: the {device} tensor's storage has been {state} but reading it needs {needed} "
        f"bytes; re-allocate it with untyped_storage().resize_(nbytes) and write it before reading")
