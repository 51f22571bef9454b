"""The device behind emulated CUDA: what ``torch.cuda`` reports, whose memory it counts and
which simulator clock its events read.

Emulation (default): a GPU preset of the cost model (``backend.sim.gpu``). Tensors report
``cuda:0``, memory is counted against the preset's HBM and a ``GpuSession`` records every op,
so ``torch.cuda.Event`` reads simulated GPU time.

Redirect: the ``neuron`` device answers for CUDA. Tensors report ``neuron:0``, memory is the
NeuronCore's and events read the NeuronCore simulator session, if there is one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from backend import recording
from backend.sim.presets import DEFAULT_GPU_TARGET

from ..events import simulated_clock_ns
from ..memory import DeviceMemory, memory_for

__all__ = ["EmulatedDevice", "EmulatedDeviceProperties", "GPU_MODELS", "ACTIVE", "active", "set_active"]

# What a real board of each preset reports: torch.cuda.get_device_name() and its compute capability.
GPU_MODELS = {
    "a100": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0)),
    "h200": ("NVIDIA H200", (9, 0)),
}
_GPU_POOLS: dict[str, DeviceMemory] = {}   # one set of books per GPU preset, kept across enables


@dataclass(frozen=True)
class EmulatedDeviceProperties:
    """The fields of ``torch.cuda.get_device_properties()`` that scripts read."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    warp_size: int = 32
    max_threads_per_multi_processor: int = 2048

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory >> 20}MB, "
                f"multi_processor_count={self.multi_processor_count}, "
                f"L2_cache_size={self.L2_cache_size >> 20}MB)")


def _gpu_model(config) -> tuple[str, tuple[int, int]]:
    """The board a preset stands for; derived configs ("h100*") keep their base's."""
    from backend.sim.gpu import PRESETS

    base = next((key for key in GPU_MODELS if config.name.startswith(key)), None)
    if base is None:   # a renamed derivation: the preset with the same SMs and clock
        base = next((key for key, preset in PRESETS.items() if key in GPU_MODELS and
                     (preset.sm_count, preset.clock_hz) == (config.sm_count, config.clock_hz)), None)
    if base is None:
        raise ValueError(f"no CUDA identity for GPU config {config.name!r}: derive it from one of "
                         f"{', '.join(GPU_MODELS)}")
    name, capability = GPU_MODELS[base]
    return (name if base == config.name else f"{name} [{config.name}]"), capability


def local_rank() -> int:
    """The GPU of this process in its node: torchrun's ``LOCAL_RANK`` (0 outside a job), so a rank
    that emulates its own GPU sees it as ``cuda:<local rank>`` as the job's scripts expect."""
    return int(os.environ.get("LOCAL_RANK", 0))


class EmulatedDevice:
    """One emulated CUDA device (``cuda:<local rank>``), backed by the neuron device's host storage."""

    def __init__(self, preset=DEFAULT_GPU_TARGET, redirect: bool = False, session=None):
        self.redirect = redirect
        if redirect:
            from .. import neuron_module

            self.config = neuron_module.get_target()
            self.reported = torch.device("neuron", 0)
            self.pool = memory_for("neuron")
            if session is None:
                from backend.lowering import EagerSession

                session = EagerSession(target=self.config.name)
            self.session = session
        else:
            from backend.sim.gpu import GpuSession, get_gpu

            self.config = get_gpu(preset)
            self.model_name, self._capability = _gpu_model(self.config)
            self.reported = torch.device("cuda", local_rank())
            self.pool = _gpu_pool(self.config, self.model_name)
            self.session = session if session is not None else GpuSession(self.config)

    # -- identity ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.redirect:
            return torch.neuron.get_device_name()
        return f"{self.model_name} (emulated)"

    def capability(self) -> tuple[int, int]:
        return torch.neuron.get_device_capability() if self.redirect else self._capability

    def properties(self) -> EmulatedDeviceProperties:
        if self.redirect:
            props = torch.neuron.get_device_properties()
            major, minor = torch.neuron.get_device_capability()
            # One NeuronCore is one "SM"; its SBUF is the on-chip memory closest to an L2.
            return EmulatedDeviceProperties(self.name, major, minor, props.total_memory, 1, props.sbuf_bytes)
        cfg = self.config
        major, minor = self._capability
        return EmulatedDeviceProperties(self.name, major, minor, int(cfg.hbm_bytes), cfg.sm_count, cfg.l2_bytes)

    # -- simulated time ------------------------------------------------------------------------
    def clock_ns(self) -> float:
        """Simulated time of the device: when everything issued so far has finished."""
        return simulated_clock_ns(self.session)


def _gpu_pool(config, model_name: str) -> DeviceMemory:
    pool = _GPU_POOLS.get(config.name)
    if pool is None:
        pool = _GPU_POOLS[config.name] = DeviceMemory("cuda", int(config.hbm_bytes),
                                                      f"GPU 0 ({model_name}, emulated)")
    return pool


class ActiveDevice:
    """The emulated device answering for ``torch.cuda`` (None while emulation is off)."""

    def __init__(self) -> None:
        self.device: EmulatedDevice | None = None

    def reset(self) -> None:
        self.device = None


ACTIVE = ActiveDevice()


def active() -> EmulatedDevice:
    device = ACTIVE.device
    if device is None:
        raise RuntimeError("CUDA emulation is off: call backend.device.cuda_emulation.enable() first")
    return device


def set_active(device: EmulatedDevice | None) -> None:
    ACTIVE.device = device
