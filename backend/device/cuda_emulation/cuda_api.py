"""The ``torch.cuda`` functions that answer for the emulated device while emulation is on.

A CPU-only build's ``torch.cuda`` raises "Torch not compiled with CUDA enabled" on first use;
these replace the functions scripts call (availability, device selection, properties, seeding,
synchronisation, memory statistics, events and streams). Values are computed by CPU kernels,
so the CPU generator is the device generator and seeding matches a CPU run.
"""
from __future__ import annotations

import torch

from . import events
from .device import active
from ..patching import Patcher

__all__ = ["API", "install"]


def _index(device) -> int:
    """Device ordinal of ``device`` (None, int, "cuda:0", torch.device); only 0 exists."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        device = device.index
    index = 0 if device is None else int(device)
    if index != 0:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (the emulated machine has one GPU, cuda:0)")
    return index


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """Reached from C++ when a CUDA tensor is requested; the emulated device needs no set-up."""


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    _index(device)


class device:
    """``with torch.cuda.device(0):`` (one device, so this only checks the ordinal)."""

    def __init__(self, device):
        # None and negative ordinals mean "leave the current device", as in torch.cuda.device.
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else _index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def synchronize(device=None) -> None:
    """Ops finish before they return; the simulator already accounts for their time."""
    _index(device)


def manual_seed(seed) -> None:
    # Not torch.manual_seed: that calls back into torch.cuda.manual_seed_all.
    torch.default_generator.manual_seed(int(seed))


def seed() -> int:
    return torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()


def get_rng_state(device="cuda") -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device="cuda") -> None:
    torch.set_rng_state(new_state)


def get_device_name(device=None) -> str:
    _index(device)
    return active().name


def get_device_properties(device=None):
    _index(device)
    return active().properties()


def get_device_capability(device=None) -> tuple[int, int]:
    _index(device)
    return active().capability()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return active().capability() >= (8, 0) or active().redirect


def is_current_stream_capturing() -> bool:
    return False


def _pool(device=None):
    _index(device)
    return active().pool


def memory_allocated(device=None) -> int:
    return _pool(device).allocated_bytes


def max_memory_allocated(device=None) -> int:
    return _pool(device).peak_allocated_bytes


def memory_reserved(device=None) -> int:
    return _pool(device).reserved_bytes


def max_memory_reserved(device=None) -> int:
    return _pool(device).peak_reserved_bytes


def reset_peak_memory_stats(device=None) -> None:
    _pool(device).reset_peak()


def memory_stats(device=None) -> dict:
    return _pool(device).stats()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    return _pool(device).summary()


def mem_get_info(device=None) -> tuple[int, int]:
    pool = _pool(device)
    return pool.capacity_bytes - pool.allocated_bytes, pool.capacity_bytes


def empty_cache() -> None:
    """Only live tensors are counted, so there is no cache to release."""


API = {
    "is_available": is_available, "is_initialized": is_initialized, "_lazy_init": _lazy_init,
    "device_count": device_count, "current_device": current_device, "set_device": set_device,
    "device": device, "synchronize": synchronize,
    "manual_seed": manual_seed, "manual_seed_all": manual_seed, "seed": seed, "seed_all": seed,
    "initial_seed": initial_seed, "get_rng_state": get_rng_state, "set_rng_state": set_rng_state,
    "get_device_name": get_device_name, "get_device_properties": get_device_properties,
    "get_device_capability": get_device_capability, "is_bf16_supported": is_bf16_supported,
    "is_current_stream_capturing": is_current_stream_capturing,
    "memory_allocated": memory_allocated, "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved, "max_memory_reserved": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_max_memory_allocated": reset_peak_memory_stats, "memory_stats": memory_stats,
    "memory_summary": memory_summary, "mem_get_info": mem_get_info, "empty_cache": empty_cache,
    "Event": events.Event, "Stream": events.Stream, "current_stream": events.current_stream,
    "default_stream": events.default_stream, "stream": events.stream, "set_stream": events.set_stream,
}


def install(patcher: Patcher) -> None:
    """Point ``torch.cuda``'s names at the emulated device's functions."""
    for name, value in API.items():
        patcher.setattr(torch.cuda, name, value)
