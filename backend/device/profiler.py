"""``torch.profiler``'s view of the ``neuron`` device: the simulated timeline as device activity.

    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        model(x)
    prof.key_averages().table(sort_by="self_device_time_total")   # simulated NeuronCore time per op
    prof.export_chrome_trace("trace.json")                        # kernels on the neuron device's track

PyTorch collects a PrivateUse1 device's activity from the Kineto activity profiler the backend
registers (``REGISTER_PRIVATEUSE1_PROFILER``); ``csrc/neuron_profiler.cpp`` is that profiler. When
a session asking for device activity starts, it calls :func:`_start` here, which subscribes a
simulator (a ``backend.lowering.EagerSession`` on the device's current target, as ``wb.profile``
times ops; ``profiler_timeline``) to the op stream of every thread; each op it times is reported
to C++ on the thread that ran it, so it is tagged with the PyTorch op running there. The session
ends with :func:`_stop`.

What the numbers are: each op's device time is its simulated duration on the NeuronCore, so
``key_averages()``' device times sum to the simulated busy time of the run (the ``wb.profile``
total less any time the compute stream idled waiting for a collective). Views cost nothing and
are not reported; collectives run on their own stream (2) beside compute (stream 1). Device
times are on the simulator's clock, whose zero is the first op's launch: the host track is the
real host, which computes every value on the CPU, so kernels usually end long before the host
op that launched them does.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
from pathlib import Path

import torch

from backend import recording

__all__ = ["install_profiler", "profiler_installed"]

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "neuron_profiler.cpp"
LIBRARY_NAME = "neuron_workbench_profiler"

_SESSION_FN = ctypes.CFUNCTYPE(None)


class _State:
    def __init__(self) -> None:
        self.library = None
        self.callbacks: tuple = ()
        self.timeline = None     # the DeviceTimeline of the session recording now
        self.stack: contextlib.ExitStack | None = None


STATE = _State()


def _report(name: str, kind: int, start_ns: float, end_ns: float, launched_ns: int) -> None:
    STATE.library.neuron_profiler_op(name.encode(), kind, 0, start_ns, end_ns, launched_ns)


def _start() -> None:
    """A Kineto session asking for device activity started: simulate every thread's device ops."""
    from .neuron_module import get_target
    from .profiler_timeline import DeviceTimeline
    target = get_target()
    STATE.library.neuron_profiler_set_label(f"neuron (simulated {target.name})".encode())
    STATE.timeline = DeviceTimeline(target, _report)
    STATE.stack = contextlib.ExitStack()
    STATE.stack.enter_context(recording.recording(STATE.timeline, all_threads=True))


def _stop() -> None:
    if STATE.stack is not None:
        STATE.stack.close()
    STATE.stack = STATE.timeline = None


def profiler_installed() -> bool:
    """Whether torch.profiler receives the device's activity in this process."""
    return STATE.library is not None


def install_profiler() -> bool:
    """Build (first time only), load and register the device's Kineto profiler. Idempotent.

    Returns False, with a warning, where it cannot be built; torch.profiler then records CPU
    activity only, as before.
    """
    if STATE.library is not None:
        return True
    from .native_hooks import build_library

    kineto = Path(torch.__file__).parent / "include" / "kineto"
    try:
        library = ctypes.CDLL(build_library(SOURCE, LIBRARY_NAME, cflags=("-DUSE_KINETO", "-DFMT_HEADER_ONLY"),
                                            include_paths=(kineto,)))
    except Exception as error:   # the device works without it; only torch.profiler loses the device
        logger.warning("torch.profiler will not show the neuron device's activity (its Kineto profiler could "
                       "not be built or loaded: %s)", error)
        return False
    library.neuron_profiler_install.argtypes = [_SESSION_FN, _SESSION_FN]
    library.neuron_profiler_set_label.argtypes = [ctypes.c_char_p]
    library.neuron_profiler_op.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                           ctypes.c_double, ctypes.c_int64]
    STATE.callbacks = (_SESSION_FN(_start), _SESSION_FN(_stop))
    library.neuron_profiler_install(*STATE.callbacks)
    STATE.library = library
    return True
