"""``torch.neuron``: the device module, shaped like ``torch.cuda``.

One simulated NeuronCore is one device (``neuron:0``); its properties and HBM capacity come
from the selected target preset (``trn1``, ``trn2`` default, ``trn3``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.sim.presets import DEFAULT_NEURON_TARGET as DEFAULT_TARGET

from .device_module import DEVICE_MODULES, DeviceModule
from .events import simulated_clock_ns
from .memory import install_pool, memory_for
from .numerics import hardware_numerics, hardware_numerics_enabled, set_hardware_numerics


class TargetSelection:
    """Which NeuronCore target ``torch.neuron`` simulates (selected on first use)."""

    def __init__(self) -> None:
        self.config = None

    def reset(self) -> None:
        """Forget the selection (tests); the next use selects the default target again."""
        self.config = None


SELECTION = TargetSelection()


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
    SELECTION.config = config
    install_pool("neuron", config.hbm_bytes, f"{config.name} NeuronCore HBM")
    return config


def get_target():
    """The config of the selected target (selecting the default on first use)."""
    return SELECTION.config or set_target(DEFAULT_TARGET)


def device_count() -> int:
    """Simulated NeuronCores visible to this process (one today)."""
    return 1


def _properties(index: int) -> NeuronDeviceProperties:
    cfg = get_target()
    return NeuronDeviceProperties(
        name=_name(index), target=cfg.name, core_version=cfg.generation,
        cores_per_chip=cfg.cores_per_chip, total_memory=cfg.hbm_bytes,
        sbuf_bytes=cfg.sbuf_bytes, psum_bytes=cfg.psum_bytes,
        tensor_engine_clock_hz=cfg.tensor_clock_hz, peak_bf16_flops_per_s=cfg.peak_flops_per_s,
        hbm_bytes_per_s=cfg.hbm_bytes_per_s)


def _name(index: int) -> str:
    cfg = get_target()
    return f"AWS {cfg.name} NeuronCore ({cfg.generation}, simulated)"


def _capability(index: int) -> tuple[int, int]:
    return (int(get_target().generation.rsplit("v", 1)[-1]), 0)


def _pool(index: int):
    return memory_for("neuron") or install_pool("neuron", get_target().hbm_bytes, "NeuronCore HBM")


MODULE = DeviceModule(
    "neuron", unit="NeuronCore", device_count=device_count, pool=_pool, name=_name,
    properties=_properties, capability=_capability, clock_ns=simulated_clock_ns, lazy_init=get_target)
DEVICE_MODULES.add(MODULE)
globals().update({name: value for name, value in MODULE.namespace().items() if name != "device_count"})

__all__ = [
    *MODULE.namespace(), "set_target", "get_target", "NeuronDeviceProperties", "MODULE", "SELECTION",
    "set_hardware_numerics", "hardware_numerics_enabled", "hardware_numerics",
]
