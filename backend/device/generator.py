"""``torch.Generator(device="neuron")``: a seeded generator for the simulated devices.

PyTorch creates a PrivateUse1 generator through ``PrivateUse1HooksInterface::getNewGenerator``,
a C++ hook that the Python-registered hooks (``torch._C._acc.PrivateUse1Hooks``) do not expose.
Device values are computed on the host anyway (see DESIGN.md: numerics and timing are separate),
so a device generator is a host (CPU, Mersenne-Twister) generator that reports the device.

Contract: ``torch.randn(n, device="neuron", generator=torch.Generator("neuron").manual_seed(s))``
equals ``torch.randn(n, generator=torch.Generator().manual_seed(s))`` bit for bit, and so does
the default generator (``torch.manual_seed(s)`` seeds the host generator the device draws from).

Its state (``get_state``) has a CUDA generator's shape, 16 bytes of (seed, offset), which
DTensor's RNG tracker reads (see ``rng_state``); a pickled generator carries the full host state.

``torch.Generator`` is replaced by :class:`Generator`, a subclass of the C type whose metaclass
keeps ``isinstance(g, torch.Generator)`` true for every generator, so code that type-checks
generators (DataLoader, ``random_split``, samplers) sees no difference.
"""
from __future__ import annotations

import torch

from backend.recording import SIMULATED_DEVICE_TYPES

from .rng_state import philox_state, set_philox_state

__all__ = ["Generator", "install_generator"]

_C_GENERATOR = torch._C.Generator


class _GeneratorType(type(_C_GENERATOR)):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _C_GENERATOR)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _C_GENERATOR)


class Generator(_C_GENERATOR, metaclass=_GeneratorType):
    """``torch.Generator``, extended with the simulated devices (a host generator underneath)."""

    def __new__(cls, device="cpu"):
        device = torch.device(device)
        if device.type not in SIMULATED_DEVICE_TYPES:
            return _C_GENERATOR(device)
        generator = _C_GENERATOR.__new__(_DeviceGenerator)   # a CPU generator underneath
        generator._device = device if device.index is not None else torch.device(device.type, 0)
        return generator


class _DeviceGenerator(_C_GENERATOR):
    _device: torch.device

    @property
    def device(self) -> torch.device:
        return self._device

    def get_state(self) -> torch.Tensor:
        """The 16-byte (seed, offset) state a CUDA generator has (see ``rng_state``)."""
        return philox_state(self)

    def set_state(self, new_state: torch.Tensor) -> _DeviceGenerator:
        set_philox_state(self, new_state)
        return self

    def __reduce__(self):
        # The full host state: a position key means nothing in another process.
        return (Generator, (str(self._device),), _C_GENERATOR.get_state(self))

    def __setstate__(self, state) -> None:
        self.set_state(state)

    def __repr__(self) -> str:
        return f"<torch.Generator object (device='{self._device}')>"


def install_generator() -> None:
    """Make ``torch.Generator`` accept the simulated devices. Idempotent."""
    if torch.Generator is not Generator:
        torch.Generator = Generator
