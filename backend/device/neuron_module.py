"""``torch.neuron``: the device module, shaped like ``torch.cuda``.

Each NeuronCore of the simulated chip is one device, ``neuron:0`` to ``neuron:<N-1>``, as the
Neuron runtime shows them: N is the chip's cores at the logical-core config (trn2: 8 at LNC=1,
4 at LNC=2), limited by ``NEURON_RT_VISIBLE_CORES``. Every core simulates the selected target
(``trn1``, ``trn2`` default, ``trn3``; ``trn2/lnc2`` at LNC=2) and keeps its own HBM books.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from backend.sim.logical_cores import default_lnc, lnc_of, logical_core, physical_name
from backend.sim.presets import DEFAULT_NEURON_TARGET as DEFAULT_TARGET

from .core_config import lnc_from_environment, visible_cores
from .device_module import DEVICE_MODULES, DeviceModule, ThreadCurrentDevice
from .event_clock import stamp
from .memory import install_pool, memory_for
from .native_hooks import native_current_device, native_storage_bytes, report_device_count, set_native_current_device
from .numerics import hardware_numerics, hardware_numerics_enabled, set_hardware_numerics


class TargetSelection:
    """Which NeuronCore target ``torch.neuron`` simulates (selected on first use), at which
    logical-core config (``lnc``: None until chosen by ``set_logical_nc_config``), and which of
    the chip's cores are visible."""

    def __init__(self) -> None:
        self.config = None          # the simulated core (a logical core's config at LNC=2)
        self.physical = None        # the physical-core config it was derived from
        self.lnc: int | None = None
        self.cores: tuple[int, ...] = ()

    def reset(self) -> None:
        """Forget the selection (tests); the next use selects the default target again."""
        self.__init__()


SELECTION = TargetSelection()


class CurrentCore:
    """This thread's current NeuronCore: kept by the C++ guard when its hooks are built (so C++
    device guards and ``torch.neuron.set_device`` agree), else per thread here."""

    def __init__(self) -> None:
        self._fallback = ThreadCurrentDevice()

    def get(self) -> int:
        index = native_current_device()
        return self._fallback.get() if index is None else index

    def set(self, index: int) -> None:
        if not set_native_current_device(index):
            self._fallback.set(index)


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


def set_target(name: str = DEFAULT_TARGET, lnc: int | None = None):
    """Select the simulated NeuronCore (preset name or a derived config). Returns its config.

    ``lnc``: the logical NeuronCore config; None keeps the one chosen with
    :func:`set_logical_nc_config`, else ``$NEURON_LOGICAL_NC_CONFIG``, else 1 (the stock preset, one
    physical core). A logical core's config (``"trn2/lnc2"``) carries its own LNC.
    """
    from backend.sim.presets import get_target as preset

    config = preset(name, kind="neuron")      # a GPU or TPU target is refused, naming its device
    if lnc_of(config) != 1:
        if lnc is not None and lnc != lnc_of(config):
            raise ValueError(f"{config.name} is a logical core at LNC={lnc_of(config)}, not LNC={lnc}")
        # The selected core's own physical config, else the stock preset it is named after.
        physical = SELECTION.physical if config is SELECTION.config else preset(physical_name(config.name))
    else:
        if lnc is None:
            lnc = SELECTION.lnc or lnc_from_environment() or default_lnc(config)
        physical, config = config, logical_core(config, lnc)
    cores = visible_cores(config.cores_per_chip)
    SELECTION.config, SELECTION.physical, SELECTION.cores = config, physical, cores
    report_device_count(len(cores))
    for index, core in enumerate(cores):
        install_pool("neuron", config.hbm_bytes, f"{config.name} NeuronCore {core} HBM", index)
    if MODULE.current_device() >= len(cores):
        MODULE.set_device(0)
    return config


def get_target():
    """The config of the selected target (selecting the default on first use)."""
    return SELECTION.config or set_target(DEFAULT_TARGET)


def set_logical_nc_config(lnc: int):
    """Simulate the selected chip at logical-core config ``lnc`` (as ``NEURON_LOGICAL_NC_CONFIG``
    does for the Neuron runtime): at 2, one device is two physical cores (``trn2/lnc2``) and a
    trn2 chip shows 4 devices. Returns the simulated core's config."""
    get_target()
    config = set_target(SELECTION.physical, int(lnc))
    SELECTION.lnc = int(lnc)
    return config


def get_logical_nc_config() -> int:
    """The logical-core config of the simulated cores (1 or 2)."""
    return lnc_of(get_target())


def device_count() -> int:
    """Simulated NeuronCores visible to this process: the chip's cores at the selected LNC,
    limited by ``NEURON_RT_VISIBLE_CORES``."""
    get_target()
    return len(SELECTION.cores)


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
    return memory_for("neuron", index) or install_pool("neuron", get_target().hbm_bytes, "NeuronCore HBM", index)


MODULE = DeviceModule(
    "neuron", unit="NeuronCore", device_count=device_count, pool=_pool, name=_name,
    properties=_properties, capability=_capability, clock=lambda: stamp(get_target), lazy_init=get_target,
    current=CurrentCore(), storage_bytes=native_storage_bytes)
DEVICE_MODULES.add(MODULE)
sys.modules.setdefault("torch.neuron.memory", MODULE.memory)    # import torch.neuron.memory
globals().update({name: value for name, value in MODULE.namespace().items() if name != "device_count"})

__all__ = [
    *MODULE.namespace(), "set_target", "get_target", "set_logical_nc_config", "get_logical_nc_config",
    "NeuronDeviceProperties", "MODULE", "SELECTION",
    "set_hardware_numerics", "hardware_numerics_enabled", "hardware_numerics",
]
