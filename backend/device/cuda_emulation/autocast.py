"""``torch.autocast("cuda")`` under CUDA emulation.

Emulated CUDA tensors are PrivateUse1 tensors, so CUDA's autocast (the AutocastCUDA dispatch
key) never sees them. While emulation is on, ``autocast(device_type="cuda")`` is sent to the
backing device type, whose AutocastPrivateUse1 kernels (backend/device/autocast.py) carry
CUDA's autocast policy.
"""
from __future__ import annotations

import torch

from .. import autocast as device_autocast
from ..patching import Patcher

__all__ = ["install"]


def install(patcher: Patcher, backing_type: str) -> None:
    """Map autocast("cuda") to ``backing_type``, whose autocast policy is registered."""
    device_autocast.register(backing_type)
    autocast = torch.amp.autocast_mode.autocast
    original_init = vars(autocast)["__init__"]

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            device_type = backing_type
        original_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    __init__.__doc__ = original_init.__doc__
    patcher.setattr(autocast, "__init__", __init__)
