"""Whether the collective a process group is handed moves a simulated device's values.

A functional collective (``torch.ops._c10d_functional.*``, what DTensor and tensor parallel
issue) reaches the device's dispatcher like any op: its host kernel then calls the process
group with the host tensors that hold the values. The dispatcher runs it inside
:func:`device_collective`, so the process group reports it as the device's collective (the
``"neuron"`` backend leaves collectives of host tensors unrecorded). The dispatcher does not
record the ``_c10d_functional`` op itself: the group's ``collective::<name>`` record (and the
``collective::wait`` of ``wait_tensor``) is its one record, not a host fallback next to it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

__all__ = ["device_collective", "in_device_collective"]

_STATE = threading.local()


@contextmanager
def device_collective():
    depth = getattr(_STATE, "depth", 0)
    _STATE.depth = depth + 1
    try:
        yield
    finally:
        _STATE.depth = depth


def in_device_collective() -> bool:
    return getattr(_STATE, "depth", 0) > 0
