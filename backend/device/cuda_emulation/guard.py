"""A device guard for the CUDA device type, which a CPU-only PyTorch build does not have.

Some C++ paths that receive ``device="cuda"`` open a device guard before any kernel runs
(``torch.tensor(data, device="cuda")``, ``torch.empty_like(x, device="cuda")``); without a
guard for CUDA they fail with "PyTorch is not linked with support for cuda devices".

PyTorch lets Python define a device guard (``torch._C._acc.DeviceGuard``) but only registers
it for PrivateUse1. c10 keeps guards in ``c10::impl::device_guard_impl_registry``, an exported
array of atomic pointers indexed by device type; we let PyTorch register our guard in the
PrivateUse1 slot (emptied for that moment), move the pointer to the CUDA slot and put
PrivateUse1's guard back. ``uninstall()`` restores the CUDA slot to what it held before.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading

import torch

__all__ = ["install", "uninstall", "is_installed", "slot_value", "GuardSlot", "SLOT"]

_REGISTRY_SYMBOL = "_ZN3c104impl26device_guard_impl_registryE"
_DeviceType = torch._C._autograd.DeviceType
_lock = threading.Lock()


class GuardSlot:
    """Our guard (kept alive: C++ holds it), its C++ address, and what c10's CUDA slot held
    before ``install()`` (None while not installed). ``reset()`` uninstalls."""

    def __init__(self) -> None:
        self.guard = None
        self.pointer: int | None = None
        self.previous: tuple | None = None

    def reset(self) -> None:
        uninstall()


SLOT = GuardSlot()


class _CudaGuard(torch._C._acc.DeviceGuard):
    """One device, one default stream: the C++ side answers everything but the device type."""

    def type_(self):
        return _DeviceType.CUDA


@functools.cache
def _registry_address() -> int:
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    return ctypes.addressof(ctypes.c_void_p.in_dll(lib, _REGISTRY_SYMBOL))


def _slot(device_type) -> ctypes.c_void_p:
    base = _registry_address()
    return ctypes.c_void_p.from_address(base + ctypes.sizeof(ctypes.c_void_p) * int(device_type))


def _guard_pointer() -> int:
    """The C++ address of our guard, obtained once per process through PyTorch's registration."""
    if SLOT.pointer is None:
        pu1 = _slot(_DeviceType.PrivateUse1)
        saved = pu1.value
        guard = _CudaGuard()
        pu1.value = None
        try:
            if not torch._C._acc.register_python_privateuseone_device_guard(guard):
                raise RuntimeError("PyTorch refused the emulated CUDA device guard")
            pointer = pu1.value
        finally:
            pu1.value = saved
        if not pointer:
            raise RuntimeError("registering the emulated CUDA device guard left no pointer; "
                               "this PyTorch version keeps device guards differently")
        SLOT.guard, SLOT.pointer = guard, pointer   # kept alive: C++ holds it
    return SLOT.pointer


def is_installed() -> bool:
    return SLOT.previous is not None


def install() -> None:
    """Put the emulated guard in c10's CUDA slot (refuses if a real CUDA guard is there)."""
    with _lock:
        if is_installed():
            return
        cuda = _slot(_DeviceType.CUDA)
        if cuda.value:
            raise RuntimeError("this PyTorch build already has a CUDA device guard; CUDA "
                               "emulation is only for CPU-only builds")
        pointer = _guard_pointer()
        SLOT.previous = (cuda.value,)
        cuda.value = pointer


def uninstall() -> None:
    with _lock:
        if not is_installed():
            return
        (previous,) = SLOT.previous
        _slot(_DeviceType.CUDA).value = previous
        SLOT.previous = None


def slot_value() -> int | None:
    """What c10's CUDA guard slot holds now (for tests that check nothing survives)."""
    return _slot(_DeviceType.CUDA).value
