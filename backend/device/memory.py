"""Simulated device memory: every device storage is counted against the target's HBM.

Numerics live in host storage; this module only keeps the books, like CUDA's caching
allocator statistics. A storage is charged when its first device tensor is created and
refunded when the last device tensor that references it is garbage-collected.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from .memory_history import HISTORIES

__all__ = ["DeviceMemory", "MemoryPools", "POOLS", "memory_for", "install_pool"]

_MIB = 1 << 20
_GIB = 1 << 30


def _rounded(nbytes: int) -> int:
    # Mirror the CUDA caching allocator's block rounding: 512 B for small, 2 MiB for large.
    if nbytes <= _MIB:
        return -(-nbytes // 512) * 512
    return -(-nbytes // (2 * _MIB)) * (2 * _MIB)


@dataclass
class DeviceMemory:
    """Allocation statistics for one simulated device (one NeuronCore or one GPU)."""

    device_type: str
    capacity_bytes: int
    label: str = ""
    index: int = 0                  # which device of its type (its memory history's trace)
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    num_allocs: int = 0
    num_frees: int = 0
    num_ooms: int = 0
    _refs: dict = field(default_factory=dict)        # storage key -> [refcount, nbytes]
    _watchers: dict = field(default_factory=dict)    # id(weakref) -> (weakref to host tensor, storage key)

    def __post_init__(self) -> None:
        # Bound once: track() hands it to a weakref per device tensor.
        self._on_freed = self._on_host_tensor_freed

    def check(self, nbytes: int) -> None:
        """Raise torch.OutOfMemoryError if ``nbytes`` more would not fit."""
        if self.allocated_bytes + nbytes > self.capacity_bytes:
            self.num_ooms += 1
            history = HISTORIES.get(self.device_type)
            if history is not None:
                history.on_oom(self.index, nbytes, self.capacity_bytes - self.allocated_bytes)
            raise torch.OutOfMemoryError(
                f"{self.device_type} out of memory. Tried to allocate {_fmt(nbytes)}. "
                f"{self.label} has a total capacity of {_fmt(self.capacity_bytes)} of which "
                f"{_fmt(self.allocated_bytes)} is already allocated "
                f"({_fmt(self.capacity_bytes - self.allocated_bytes)} free). Free tensors "
                f"(del, then gc.collect()) or pick a target with more HBM.")

    def track(self, inner: torch.Tensor) -> None:
        """Count the storage of a new device tensor's host tensor; refund it when the last
        host tensor on that storage dies.

        The host tensor is watched rather than the wrapper: torch.utils.swap_tensors (used by
        Module.to) refuses wrappers that carry weakrefs, and the host tensor dies with its
        wrapper. No lock: dict updates are atomic under the GIL, and a lock could deadlock when
        a weakref callback fires inside track().
        """
        if inner.__class__ is not torch.Tensor:
            return  # a tracer's fake/functional tensor (torch.compile): no storage to count
        key = _storage_key(inner)
        entry = self._refs.get(key)
        if entry is None:
            nbytes = _nbytes(inner)
            self.check(nbytes)
            entry = self._refs[key] = [0, nbytes]
            self.allocated_bytes += nbytes
            self.reserved_bytes += _rounded(nbytes)
            self.num_allocs += 1
            if self.allocated_bytes > self.peak_allocated_bytes:
                self.peak_allocated_bytes = self.allocated_bytes
            if self.reserved_bytes > self.peak_reserved_bytes:
                self.peak_reserved_bytes = self.reserved_bytes
            if HISTORIES:
                self._note(key, nbytes, allocated=True)
        entry[0] += 1
        # Keyed by id: two weakrefs to one live tensor compare equal.
        ref = weakref.ref(inner, self._on_freed)
        self._watchers[id(ref)] = (ref, key)

    def resize(self, inner: torch.Tensor, nbytes: int) -> None:
        """Re-book the storage of a tracked host tensor at ``nbytes`` (``storage.resize_``:
        FSDP2 frees and re-allocates unsharded parameters this way)."""
        key = _storage_key(inner)
        entry = self._refs.get(key)
        if entry is None or entry[1] == nbytes:
            return
        if nbytes > entry[1]:
            self.check(nbytes - entry[1])
            self.num_allocs += entry[1] == 0
        else:
            self.num_frees += nbytes == 0
        if HISTORIES:     # re-allocated at the new size, as a caching allocator would
            if entry[1]:
                self._note(key, entry[1], allocated=False)
            if nbytes:
                self._note(key, nbytes, allocated=True)
        self.allocated_bytes += nbytes - entry[1]
        self.reserved_bytes += _rounded(nbytes) - _rounded(entry[1])
        entry[1] = nbytes
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def _on_host_tensor_freed(self, ref) -> None:
        _, key = self._watchers.pop(id(ref), (None, None))
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._refs[key]
            self.allocated_bytes -= entry[1]
            self.reserved_bytes -= _rounded(entry[1])
            self.num_frees += 1
            if HISTORIES and entry[1]:
                self._note(key, entry[1], allocated=False)

    def _note(self, key, nbytes: int, allocated: bool) -> None:
        """Tell the memory history (if recording) that storage ``key`` got or gave ``nbytes``."""
        history = HISTORIES.get(self.device_type)
        if history is not None:
            (history.on_alloc if allocated else history.on_free)(self.index, key, _rounded(nbytes))

    def live_storages(self):
        """(address, [host tensors, bytes]) of each storage counted now (the key is the host
        storage's address; a sparse tensor's or timing-only storage's is an id)."""
        return list(self._refs.items())

    @staticmethod
    def reserved_size(nbytes: int) -> int:
        """What a storage of ``nbytes`` reserves (CUDA's caching-allocator rounding)."""
        return _rounded(nbytes)

    def reset_peak(self) -> None:
        self.peak_allocated_bytes = self.allocated_bytes
        self.peak_reserved_bytes = self.reserved_bytes

    def stats(self) -> dict:
        """``torch.cuda.memory_stats``-style flat dict."""
        return {
            "allocated_bytes.all.current": self.allocated_bytes,
            "allocated_bytes.all.peak": self.peak_allocated_bytes,
            "reserved_bytes.all.current": self.reserved_bytes,
            "reserved_bytes.all.peak": self.peak_reserved_bytes,
            "allocation.all.allocated": self.num_allocs,
            "allocation.all.freed": self.num_frees,
            "allocation.all.current": len(self._refs),
            "num_ooms": self.num_ooms,
            "capacity_bytes": self.capacity_bytes,
        }

    def summary(self) -> str:
        rows = [
            ("Allocated memory", self.allocated_bytes, self.peak_allocated_bytes),
            ("Reserved memory", self.reserved_bytes, self.peak_reserved_bytes),
        ]
        lines = [f"|{'=' * 66}|",
                 f"| {self.device_type} memory summary: {self.label}".ljust(67) + "|",
                 f"| capacity {_fmt(self.capacity_bytes)}, OOMs {self.num_ooms}".ljust(67) + "|",
                 f"|{'-' * 66}|",
                 f"| {'Metric':<24}{'Cur Usage':>20}{'Peak Usage':>20} |"]
        lines += [f"| {name:<24}{_fmt(cur):>20}{_fmt(peak):>20} |" for name, cur, peak in rows]
        lines += [f"| {'Live storages':<24}{len(self._refs):>20}{'':>20} |", f"|{'=' * 66}|"]
        return "\n".join(lines)


def _nbytes(inner: torch.Tensor) -> int:
    """Bytes a host tensor holds: its storage, or a sparse COO tensor's index and value storages
    (the compressed layouts never reach the device: ``DeviceTensor`` refuses them)."""
    if inner.layout == torch.strided:
        return inner.untyped_storage().nbytes()
    return sum(part.untyped_storage().nbytes() for part in (inner._indices(), inner._values()))


def _storage_key(inner: torch.Tensor):
    """What identifies a host tensor's storage in the books (shared by its views)."""
    if inner.layout != torch.strided:
        return id(inner)   # a sparse tensor has no storage of its own; it dies with its wrapper
    storage = inner.untyped_storage()
    # A data-free (meta) storage has no address: its StorageImpl identifies it.
    return storage._cdata if inner.is_meta else storage.data_ptr() or id(storage)


def _fmt(nbytes: int) -> str:
    for unit, scale in (("GiB", _GIB), ("MiB", _MIB), ("KiB", 1024)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


_DEVICE_KEYS: dict = {}       # torch.device -> its pool key (MemoryPools.for_device)


class MemoryPools(dict):
    """The memory books of each simulated device: ``"neuron"`` (and ``"cuda"``) for device 0,
    ``("neuron", i)`` for device ``i`` > 0, so each NeuronCore of a chip is charged on its own.

    A dict so that CUDA emulation can swap entries through its reversible ``Patcher``.
    """

    @staticmethod
    def key(device_type: str, index: int | None = 0):
        return device_type if not index else (device_type, index)

    def for_device(self, device: torch.device) -> DeviceMemory | None:
        """The books of ``device`` (its index None or 0: the device type's first device).

        On every device tensor's creation: ``device.type`` builds a new string per call (a
        PrivateUse1 name look-up) while hashing a device is cheap, so keys are kept per device
        (few distinct devices ever exist)."""
        key = _DEVICE_KEYS.get(device)
        if key is None:
            key = _DEVICE_KEYS[device] = self.key(device.type, device.index)
        return self.get(key)

    def install(self, device_type: str, capacity_bytes: int, label: str, index: int = 0) -> DeviceMemory:
        """(Re)configure the pool of a device, keeping live allocations when resized."""
        key = self.key(device_type, index)
        pool = self.get(key)
        if pool is None:
            pool = self[key] = DeviceMemory(device_type, capacity_bytes, label, index)
        else:
            pool.capacity_bytes = capacity_bytes
            pool.label = label
        return pool

    def reset(self) -> None:
        """Forget every pool (tests); the next device use installs fresh books."""
        self.clear()


POOLS = MemoryPools()


def memory_for(device_type: str, index: int = 0) -> DeviceMemory | None:
    """The memory books of a device ("neuron" or "cuda", and its index), if that device is active."""
    return POOLS.get(POOLS.key(device_type, index))


def install_pool(device_type: str, capacity_bytes: int, label: str, index: int = 0) -> DeviceMemory:
    """(Re)configure the pool of a device, keeping live allocations when resized."""
    return POOLS.install(device_type, capacity_bytes, label, index)
