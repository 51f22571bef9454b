"""Turning CUDA emulation on and off.

``enable()`` applies every change through one :class:`Patcher`; ``disable()`` undoes them in
reverse order, so torch's attributes, dispatch registrations and c10's device-guard slot are
exactly what they were before. One PyTorch latch cannot be undone: the first ``device="cuda"``
request that reaches C++ marks CUDA as lazily initialised for the life of the process (PyTorch
has no API to clear it), so after ``disable()`` such a request fails inside the dispatcher
("Could not run ... with arguments from the 'CUDA' backend") rather than with "Torch not
compiled with CUDA enabled"; ``torch.cuda.is_available()`` is False again either way.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import torch

from backend import recording
from backend.sim.presets import DEFAULT_GPU_TARGET

from .. import memory, neuron_module
from ..factories import register_factories, unregister_factories
from ..patching import Patcher
from ..registration import register
from . import autocast, compile_routing, cuda_api, guard, tensors
from .device import ACTIVE, EmulatedDevice, set_active

__all__ = ["enable", "disable", "is_enabled", "emulate_cuda", "current", "EXTENSIONS"]

log = logging.getLogger(__name__)
_lock = threading.RLock()


class EmulationPatches:
    """The patches of the emulation that is on (None while off); ``reset()`` turns it off."""

    def __init__(self) -> None:
        self.patcher: Patcher | None = None

    def reset(self) -> None:
        disable()


PATCHES = EmulationPatches()

# What layers above the device turn on with emulation (``backend.distributed`` adds "nccl"):
# each ``extend(patcher, device)`` is applied last and undone with the rest. They register
# themselves here because the device layer never imports them.
EXTENSIONS: list[Callable[[Patcher, EmulatedDevice], None]] = []


def is_enabled() -> bool:
    return PATCHES.patcher is not None


def current() -> EmulatedDevice | None:
    """The emulated device while emulation is on (its ``session`` holds the simulated trace)."""
    return ACTIVE.device


def enable(preset=DEFAULT_GPU_TARGET, redirect: bool = False, session=None) -> EmulatedDevice:
    """Make CUDA-written code run on a simulated device in this CPU-only PyTorch.

    preset: GPU cost-model preset ("a100", "h100", "h200" or a GpuConfig) when emulating.
    redirect: run "cuda" work on the ``neuron`` device instead (tensors report neuron:0).
    session: the simulator sink whose clock ``torch.cuda.Event`` reads (default: a fresh
        ``GpuSession(preset)``, or the NeuronCore's eager session when redirecting).
    """
    with _lock:
        if is_enabled():
            raise RuntimeError("CUDA emulation is already on; disable() it before enabling it again")
        if torch.backends.cuda.is_built():
            raise RuntimeError("CUDA emulation is for CPU-only PyTorch builds; this one has CUDA")
        register()
        device = EmulatedDevice(preset, redirect, session)
        backing = torch.device("neuron", 0)
        patcher = Patcher()
        try:   # all or nothing, Ctrl-C included: a half-applied emulation is never left behind
            _apply(patcher, device, backing)
            set_active(device)
            PATCHES.patcher = patcher
        except BaseException:
            set_active(None)
            PATCHES.patcher = None
            patcher.restore()
            raise
        log.info("CUDA emulation on: %s (%d patches)", device.name, len(patcher))
        return device


def _apply(patcher: Patcher, device: EmulatedDevice, backing: torch.device) -> None:
    # Each undo is registered before its step (both undos are no-ops if the step never ran).
    patcher.on_restore("c10 CUDA device guard", guard.uninstall)
    guard.install()
    patcher.on_restore("aten CUDA allocators", lambda: unregister_factories("CUDA"))
    register_factories("CUDA")
    patcher.add(recording.SIMULATED_DEVICE_TYPES, "cuda", "SIMULATED_DEVICE_TYPES")
    # Wrappers are counted in the books of the device type they were made for (allocations
    # inside C++ name the backing device), so both names must find the emulated device's
    # books. Select the neuron target first: selecting it later would reconfigure these.
    neuron_module.get_target()
    patcher.setitem(memory.POOLS, "cuda", device.pool, "memory.POOLS")
    reported = memory.POOLS.key(device.reported.type, device.reported.index)   # cuda:<local rank>
    if reported != "cuda":
        patcher.setitem(memory.POOLS, reported, device.pool, "memory.POOLS")
    patcher.setitem(memory.POOLS, "neuron", device.pool, "memory.POOLS")
    cuda_api.install(patcher)
    tensors.install(patcher, backing, device.reported)
    autocast.install(patcher, backing.type)
    compile_routing.install(patcher)
    if device.session is not None:
        stack = contextlib.ExitStack()
        stack.enter_context(recording.recording(device.session, all_threads=True))  # the device clock
        patcher.on_restore("recording sink", stack.close)
    for extend in EXTENSIONS:
        extend(patcher, device)


def disable() -> None:
    """Undo every change ``enable()`` made. Tensors made while on stay valid (on neuron:0)."""
    with _lock:
        patcher = PATCHES.patcher
        if patcher is None:
            return
        set_active(None)
        PATCHES.patcher = None
        patcher.restore()
        log.info("CUDA emulation off")


@contextlib.contextmanager
def emulate_cuda(preset=DEFAULT_GPU_TARGET, redirect: bool = False, session=None):
    """``with emulate_cuda("h100"):`` run CUDA-written code on the emulated device."""
    device = enable(preset, redirect, session)
    try:
        yield device
    finally:
        disable()
