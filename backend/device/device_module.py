"""One ``torch.cuda``-shaped device module, shared by ``torch.neuron`` and emulated ``torch.cuda``.

A :class:`DeviceModule` is parameterised by what differs between the simulated devices (device
type, how many there are, their names, properties and memory books, the simulator clock their
events read); everything else (device selection, seeding, memory statistics, streams, AMP
hooks) is written once here. Device indices are validated in one place, :func:`device_index`,
which is also what the tensor factories call, so ``torch.empty(2, device="neuron:1")`` and
``torch.neuron.memory_allocated("neuron:1")`` fail the same way.
"""
from __future__ import annotations

import pickle
import threading
import types
from collections.abc import Callable

import torch

from . import timing_only
from .event_clock import Stamp
from .events import stream_api
from .memory import DeviceMemory
from .memory_history import record_memory_history, snapshot
from .rng_state import philox_state, set_philox_state

__all__ = ["DeviceModule", "DeviceModules", "ThreadCurrentDevice", "DEVICE_MODULES", "device_index", "check_device", "AMP_DTYPES",
           "REPORTED_AS", "reported_device"]

# What autocast may cast to on a simulated device (TensorE and tensor cores both take these).
AMP_DTYPES = (torch.float16, torch.bfloat16)


def _ordinal_error(device_type: str, index, count: int, unit: str) -> RuntimeError:
    prefix = "CUDA" if device_type == "cuda" else device_type
    units = unit if count == 1 else f"{unit}s"
    valid = ", ".join(f"{device_type}:{i}" for i in range(count))
    return RuntimeError(f"{prefix} error: invalid device ordinal {index} "
                        f"(this machine has {count} {units}: {valid})")


def device_index(device, device_type: str, count: int, unit: str = "device", current: int = 0) -> int:
    """The ordinal ``device`` names on ``device_type`` (None means the current device, ``current``).

    ``device``: None, an int, a string ("neuron", "neuron:1") or a ``torch.device``. Raises
    ValueError for another device type and RuntimeError for an ordinal outside ``count``.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != device_type:
            raise ValueError(f"Expected a {device_type} device, but got: {device}")
        device = device.index
    if device is None:
        return current
    index = int(device)
    if not 0 <= index < count:
        raise _ordinal_error(device_type, index, count, unit)
    return index


class ThreadCurrentDevice(threading.local):
    """The current device of each thread, as CUDA keeps one per thread (0 until set)."""

    index = 0

    def get(self) -> int:
        return self.index

    def set(self, index: int) -> None:
        self.index = index


class DeviceModule:
    """The functions of a ``torch.cuda``-shaped module for one simulated device type.

    device_count: how many devices of this type exist (the NeuronCores of the chip).
    pool / name / properties / capability: per device index.
    clock: the simulated time its events read (an ``event_clock.Stamp``).
    current: the per-thread current device (get/set), by default kept here.
    memory_fallback: a module answering for ``torch.<device>.memory`` names this one lacks.
    """

    def __init__(self, device_type: str, *, unit: str, device_count: Callable[[], int],
                 pool: Callable[[int], DeviceMemory], name: Callable[[int], str],
                 properties: Callable[[int], object], capability: Callable[[int], tuple[int, int]],
                 clock: Callable[[], Stamp], lazy_init: Callable[[], object] = lambda: None,
                 bf16_supported: Callable[[], bool] = lambda: True, current=None, memory_fallback=None,
                 storage_bytes: Callable[[int], tuple[int, int]] = lambda index: (0, 0)):
        self.device_type = device_type
        self._storage_bytes = storage_bytes
        self._current = current if current is not None else ThreadCurrentDevice()
        self.unit = unit
        self._count = device_count
        self._pool = pool
        self._name = name
        self._properties = properties
        self._capability = capability
        self._lazy_init_hook = lazy_init
        self._bf16_supported = bf16_supported
        self._streams = stream_api(device_type, lambda: torch.device(device_type, self.current_device()), clock)
        self.device = self._device_context_type()
        self.memory = self._memory_module(memory_fallback)

    # -- device selection --------------------------------------------------------------------
    def index(self, device=None) -> int:
        """Validated ordinal of ``device`` (None, int, "neuron:1", torch.device); None and an
        index-less device mean the current device."""
        return device_index(device, self.device_type, self._count(), self.unit, self._current.get())

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _is_in_bad_fork(self) -> bool:
        return False

    def _lazy_init(self) -> None:
        """Reached from C++ before the first device tensor; selects the default target."""
        self._lazy_init_hook()

    def device_count(self) -> int:
        return self._count()

    def current_device(self) -> int:
        return self._current.get()

    def set_device(self, device) -> None:
        """Make ``device`` this thread's current device (a negative ordinal changes nothing)."""
        if isinstance(device, int) and device < 0:
            return
        self._current.set(self.index(device))

    def _device_context_type(self):
        module = self

        class device:
            """``with torch.<device>.device(i):`` makes ``i`` the current device inside the block."""

            def __init__(self, device):
                # None and negative ordinals mean "leave the current device", as in torch.cuda.device.
                self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else module.index(device)
                self.prev_idx = -1

            def __enter__(self):
                self.prev_idx = module.current_device()
                if self.idx >= 0:
                    module.set_device(self.idx)
                return self

            def __exit__(self, *exc) -> bool:
                module.set_device(self.prev_idx)
                return False

        device.__module__ = f"torch.{self.device_type}"
        return device

    def synchronize(self, device=None) -> None:
        """Ops finish before they return; the simulator already accounts for their time."""
        self.index(device)

    # -- random numbers: values come from CPU kernels, so the CPU generator is the device's --
    def manual_seed(self, seed) -> None:
        # Not torch.manual_seed: that calls back into this module's manual_seed_all.
        torch.default_generator.manual_seed(int(seed))

    def seed(self) -> int:
        return torch.seed()

    def initial_seed(self) -> int:
        return torch.initial_seed()

    # States are CUDA-shaped (16 bytes: seed, offset), as DTensor's RNG tracker reads them; every
    # device of the type draws from the one host generator (see rng_state).
    def get_rng_state(self, device=None) -> torch.Tensor:
        self.index(device)
        return philox_state(torch.default_generator)

    def set_rng_state(self, new_state: torch.Tensor, device=None) -> None:
        self.index(device)
        set_philox_state(torch.default_generator, new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.device_count())]

    def set_rng_state_all(self, new_states) -> None:
        for index, state in enumerate(new_states):
            self.set_rng_state(state, index)

    # -- identity ------------------------------------------------------------------------------
    def get_device_name(self, device=None) -> str:
        return self._name(self.index(device))

    def get_device_properties(self, device=None):
        return self._properties(self.index(device))

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return self._capability(self.index(device))

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self._bf16_supported()

    def is_current_stream_capturing(self) -> bool:
        return False

    # -- AMP: torch.autocast / torch.utils.checkpoint ask the device module -----------------
    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return list(AMP_DTYPES)

    # -- memory statistics -------------------------------------------------------------------
    def memory_pool(self, device=None) -> DeviceMemory:
        """The allocation books of ``device``."""
        return self._pool(self.index(device))

    def _storages(self, device) -> tuple[int, int]:
        """Current and peak bytes of storages made directly on ``device`` (not by tensors)."""
        return self._storage_bytes(self.index(device))

    # Storages made directly count as allocated; the peak of a sum is reported as at most the
    # sum of the peaks, as the C++ allocator's statistics report it.
    def memory_allocated(self, device=None) -> int:
        return self.memory_pool(device).allocated_bytes + self._storages(device)[0]

    def max_memory_allocated(self, device=None) -> int:
        return self.memory_pool(device).peak_allocated_bytes + self._storages(device)[1]

    def memory_reserved(self, device=None) -> int:
        return self.memory_pool(device).reserved_bytes + self._storages(device)[0]

    def max_memory_reserved(self, device=None) -> int:
        return self.memory_pool(device).peak_reserved_bytes + self._storages(device)[1]

    def reset_peak_memory_stats(self, device=None) -> None:
        self.memory_pool(device).reset_peak()

    def memory_stats(self, device=None) -> dict:
        return self.memory_pool(device).stats()

    def memory_summary(self, device=None, abbreviated: bool = False) -> str:
        return self.memory_pool(device).summary()

    def mem_get_info(self, device=None) -> tuple[int, int]:
        pool = self.memory_pool(device)
        return pool.capacity_bytes - self.memory_allocated(device), pool.capacity_bytes

    def empty_cache(self) -> None:
        """Only live tensors are counted, so there is no cache to release."""

    # -- memory history and snapshots: torch.cuda.memory's, read by torch.cuda._memory_viz ----
    def _record_memory_history(self, enabled="all", *args, **kwargs) -> None:
        if isinstance(enabled, bool):    # the legacy signature: (enabled, trace_alloc_max_entries=...)
            kwargs = {"max_entries": kwargs["trace_alloc_max_entries"]} if "trace_alloc_max_entries" in kwargs else {}
            enabled, args = ("all" if enabled else None), ()
        record_memory_history(self.device_type, enabled, *args, **kwargs)

    def _snapshot(self, device=None, augment_with_fx_traces: bool = False) -> dict:
        pools: dict = {}
        for index in range(self.device_count()):
            pool = self._pool(index)
            if all(pool is not seen for seen in pools.values()):   # emulated GPUs share one
                pools[index] = pool
        return snapshot(self.device_type, pools)

    def memory_snapshot(self, mempool_id=None, include_traces: bool = True) -> list[dict]:
        return self._snapshot()["segments"]

    def _dump_snapshot(self, filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
        with open(filename, "wb") as f:
            pickle.dump(self._snapshot(), f)

    MEMORY_FUNCTIONS = ("_record_memory_history", "_snapshot", "memory_snapshot", "_dump_snapshot",
                        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                        "reset_peak_memory_stats", "memory_stats", "memory_summary", "mem_get_info", "empty_cache")

    def _memory_module(self, fallback=None) -> types.ModuleType:
        """``torch.<device>.memory``; names it lacks come from ``fallback`` (a module), if any."""
        module = types.ModuleType(f"torch.{self.device_type}.memory", "Memory statistics, history and snapshots.")
        for name in self.MEMORY_FUNCTIONS:
            setattr(module, name, getattr(self, name))
        module.reset_max_memory_allocated = self.reset_peak_memory_stats
        if fallback is not None:
            module.__getattr__ = lambda name: getattr(fallback, name)
        return module

    # -- timing-only mode: process-wide, shared by every simulated device type ---------------
    @staticmethod
    def timing_only(enabled: bool = True, *, values_up_to: int | None = None):
        """``with torch.neuron.timing_only():`` tensors made inside hold no values, only shapes,
        except those of at most ``values_up_to`` elements (65,536 unless set: masks, ids)."""
        return timing_only.timing_only(enabled, values_up_to=values_up_to)

    @staticmethod
    def set_timing_only(enabled: bool = True, *, values_up_to: int | None = None) -> None:
        timing_only.set_timing_only(enabled, values_up_to=values_up_to)

    @staticmethod
    def is_timing_only() -> bool:
        return timing_only.is_timing_only()

    # -- the module namespace ------------------------------------------------------------------
    FUNCTIONS = (
        "is_available", "is_initialized", "_is_in_bad_fork", "_lazy_init", "device_count",
        "current_device", "set_device", "synchronize", "manual_seed", "seed", "initial_seed",
        "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "get_device_name", "get_device_properties",
        "get_device_capability", "is_bf16_supported", "is_current_stream_capturing",
        "get_amp_supported_dtype", "memory_allocated", "max_memory_allocated", "memory_reserved",
        "max_memory_reserved", "reset_peak_memory_stats", "memory_stats", "memory_summary",
        "mem_get_info", "empty_cache", "memory_snapshot", "timing_only", "set_timing_only", "is_timing_only",
    )
    ALIASES = {"manual_seed_all": "manual_seed", "seed_all": "seed",
               "reset_max_memory_allocated": "reset_peak_memory_stats"}

    def namespace(self) -> dict:
        """Name -> object for every ``torch.<device>`` attribute this module provides."""
        names = {name: getattr(self, name) for name in self.FUNCTIONS}
        names.update({alias: names[target] for alias, target in self.ALIASES.items()})
        names["device"] = self.device
        names["memory"] = self.memory
        names.update(self._streams)
        return names


class DeviceModules:
    """The device module answering for each simulated device type (for index validation)."""

    def __init__(self) -> None:
        self._by_type: dict[str, DeviceModule] = {}

    def add(self, module: DeviceModule) -> None:
        self._by_type[module.device_type] = module

    def remove(self, device_type: str) -> None:
        self._by_type.pop(device_type, None)

    def get(self, device_type: str) -> DeviceModule | None:
        return self._by_type.get(device_type)

    def reset(self) -> None:
        self._by_type.clear()


DEVICE_MODULES = DeviceModules()


def check_device(device: torch.device) -> None:
    """Raise PyTorch's invalid-ordinal error if ``device`` names a device that does not exist."""
    module = DEVICE_MODULES.get(device.type)
    if module is not None:
        module.index(device)


# Device type -> the device that C++-named devices of that type stand for. CUDA emulation maps
# "neuron" to cuda:0: emulated tensors live on the neuron device in C++, so C++ names neuron:0
# when it allocates for them (``at::empty(options)``, ``_to_copy(device=...)`` in backward).
REPORTED_AS: dict[str, torch.device] = {}


def reported_device(device: torch.device) -> torch.device:
    """The device a new tensor requested by C++ on ``device`` reports (index filled in: the
    current device of its type, as for ``torch.empty(2, device="cuda")``).

    ``REPORTED_AS`` (CUDA emulation) re-labels C++'s own allocations on the backing device, which
    name it with an index taken from a tensor. A device without an index was named by the user
    (``device="neuron"``): that one is what they asked for, so an op mixing it with an emulated
    cuda tensor raises PyTorch's "Expected all tensors to be on the same device"."""
    if device.index is None:
        module = DEVICE_MODULES.get(device.type)
        return torch.device(device.type, module.current_device() if module is not None else 0)
    return REPORTED_AS.get(device.type, device) if device.index == 0 else device
