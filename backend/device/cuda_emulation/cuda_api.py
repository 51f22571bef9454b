"""The ``torch.cuda`` functions that answer for the emulated device while emulation is on.

A CPU-only build's ``torch.cuda`` raises "Torch not compiled with CUDA enabled" on first use;
emulation points its names at a :class:`~backend.device.device_module.DeviceModule` (the same
implementation as ``torch.neuron``) whose answers come from the active emulated device.
"""
from __future__ import annotations

import torch

from ..device_module import DEVICE_MODULES, DeviceModule
from ..event_clock import Stamp
from .device import active
from ..patching import Patcher

__all__ = ["MODULE", "install"]


def _bf16_supported() -> bool:
    return active().capability() >= (8, 0) or active().redirect


MODULE = DeviceModule(
    "cuda", unit="GPU", device_count=lambda: active().reported.index + 1, pool=lambda index: active().pool,
    name=lambda index: active().name, properties=lambda index: active().properties(),
    capability=lambda index: active().capability(), clock=lambda: Stamp(active().clock_ns(), active().session),
    bf16_supported=_bf16_supported, memory_fallback=torch.cuda.memory)


def install(patcher: Patcher) -> None:
    """Point ``torch.cuda``'s names at the emulated device's functions."""
    for name, value in MODULE.namespace().items():
        patcher.setattr(torch.cuda, name, value)
    DEVICE_MODULES.add(MODULE)
    patcher.on_restore("cuda device module", lambda: DEVICE_MODULES.remove("cuda"))
