"""The Neuron runtime's environment variables that shape the ``neuron`` devices of a process.

``NEURON_LOGICAL_NC_CONFIG``: the logical NeuronCore config (1 or 2; ``backend.sim.logical_cores``).
``NEURON_RT_VISIBLE_CORES``: which cores of the chip this process sees, e.g. ``"0-3"`` or
``"1,3"``; they are renumbered from 0 (``neuron:0`` is the first visible core), as
``CUDA_VISIBLE_DEVICES`` does for GPUs. Core ids count the cores the runtime shows, i.e. logical
cores at LNC=2 (what the Neuron runtime documents for LNC=2; not in shared/hardware.md).
"""
from __future__ import annotations

import os

__all__ = ["LNC_ENV", "LNC_VALUES", "VISIBLE_CORES_ENV", "lnc_from_environment", "visible_cores"]

LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
LNC_VALUES = (1, 2)        # what the Neuron runtime accepts (the generation may allow fewer)
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"


def lnc_from_environment() -> int | None:
    """``$NEURON_LOGICAL_NC_CONFIG`` as an int (None when unset or empty); any value but 1 or 2
    (``0`` included: it is not "unset") is a ValueError."""
    text = os.environ.get(LNC_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in LNC_VALUES:
        raise ValueError(f"{LNC_ENV}={text!r} is not a logical NeuronCore config; use 1 or 2 "
                         f"(or unset it for the default)")
    return value


def visible_cores(count: int) -> tuple[int, ...]:
    """The core ids of the chip's ``count`` cores this process sees, in device order."""
    text = os.environ.get(VISIBLE_CORES_ENV, "").strip()
    if not text:
        return tuple(range(count))
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"{VISIBLE_CORES_ENV}={text!r}: expected core ids and ranges such as "
                             f"'0-3' or '0,2'") from None
        if low > high:
            raise ValueError(f"{VISIBLE_CORES_ENV}={text!r}: range {part.strip()!r} is empty")
        cores.extend(core for core in range(low, high + 1) if core not in cores)
    outside = [core for core in cores if core >= count]
    if outside:
        raise RuntimeError(f"{VISIBLE_CORES_ENV}={text!r} names NeuronCore {outside[0]}, but the simulated "
                           f"chip has {count} (0-{count - 1})")
    return tuple(cores)
