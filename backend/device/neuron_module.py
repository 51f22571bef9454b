"""``torch.neuron``: the device module, shaped like ``torch.cuda``.

One simulated NeuronCore is one device (``neuron:0``); its properties and HBM capacity come
from the selected target preset (``trn1``, ``trn2`` default, ``trn3``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .memory import install_pool, memory_for
from .numerics import hardware_numerics, hardware_numerics_enabled, set_hardware_numerics

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "device",
    "synchronize", "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state",
    "set_rng_state", "get_device_name", "get_device_properties", "get_device_capability",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "memory_stats", "memory_summary", "empty_cache",
    "set_target", "get_target", "NeuronDeviceProperties",
    "set_hardware_numerics", "hardware_numerics_enabled", "hardware_numerics",
]

from backend.sim.presets import DEFAULT_NEURON_TARGET as DEFAULT_TARGET
_state = {"target": None}


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    target: str
    core_version: str          # NC-v2 / NC-v3 / NC-v4
    cores_per_chip: int
    total_memory: int          # HBM bytes available to this NeuronCore
    sbuf_bytes: int
    psum_bytes: int
    tensor_engine_clock_hz: float
    peak_bf16_flops_per_s: float
    hbm_bytes_per_s: float


def set_target(name: str = DEFAULT_TARGET):
    """Select the simulated NeuronCore (preset name or a derived config). Returns its config."""
    from backend.sim.presets import get_target as preset

    config = preset(name) if isinstance(name, str) else name
    _state["target"] = config
    install_pool("neuron", config.hbm_bytes, f"{config.name} NeuronCore HBM")
    return config


def get_target():
    """The config of the selected target (selecting the default on first use)."""
    return _state["target"] or set_target(DEFAULT_TARGET)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    get_target()


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _check_index(index) -> int:
    if isinstance(index, torch.device):
        index = index.index or 0
    index = 0 if index is None else int(index)
    if index != 0:
        raise RuntimeError(f"Invalid device ordinal {index}: the workbench simulates 1 NeuronCore (neuron:0)")
    return index


def set_device(index) -> None:
    _check_index(index)


@contextlib.contextmanager
def device(index):
    """``with torch.neuron.device(0):`` — one simulated core, so only validates the index."""
    _check_index(index)
    yield


def synchronize(device=None) -> None:
    """The simulator runs ops synchronously, so there is never work in flight."""


def manual_seed(seed: int) -> None:
    # Values are computed by CPU kernels, so the CPU generator is the device generator.
    # (Not torch.manual_seed: that calls back into this function for custom devices.)
    torch.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> int:
    return torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(new_state)


def get_device_properties(device=None) -> NeuronDeviceProperties:
    _check_index(device)
    cfg = get_target()
    return NeuronDeviceProperties(
        name=get_device_name(), target=cfg.name, core_version=cfg.generation,
        cores_per_chip=cfg.cores_per_chip, total_memory=cfg.hbm_bytes,
        sbuf_bytes=cfg.sbuf_bytes, psum_bytes=cfg.psum_bytes,
        tensor_engine_clock_hz=cfg.tensor_clock_hz, peak_bf16_flops_per_s=cfg.peak_flops_per_s,
        hbm_bytes_per_s=cfg.hbm_bytes_per_s)


def get_device_name(device=None) -> str:
    cfg = get_target()
    return f"AWS {cfg.name} NeuronCore ({cfg.generation}, simulated)"


def get_device_capability(device=None) -> tuple[int, int]:
    return (int(get_target().generation.rsplit("v", 1)[-1]), 0)


def _pool():
    return memory_for("neuron") or install_pool("neuron", get_target().hbm_bytes, "NeuronCore HBM")


def memory_allocated(device=None) -> int:
    return _pool().allocated_bytes


def max_memory_allocated(device=None) -> int:
    return _pool().peak_allocated_bytes


def memory_reserved(device=None) -> int:
    return _pool().reserved_bytes


def max_memory_reserved(device=None) -> int:
    return _pool().peak_reserved_bytes


def reset_peak_memory_stats(device=None) -> None:
    _pool().reset_peak()


def memory_stats(device=None) -> dict:
    return _pool().stats()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    return _pool().summary()


def empty_cache() -> None:
    """Nothing is cached beyond live tensors; kept for API parity with torch.cuda."""
