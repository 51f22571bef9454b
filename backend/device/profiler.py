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

The legacy ``torch.autograd.profiler.profile(use_device="neuron")`` (no Kineto) takes an op's
device time from a pair of events the device's ProfilerStubs record around it; here each event
reads the simulated clock (:func:`_clock_ns`, which starts a clock-only timeline for the profile
and lets it go at the first device op after the profile ends). That is the simulated time from
the op's start to its end, launch gaps included, in whole microseconds, and goes to the innermost
op around the device work (``PythonSubclass``), as CUDA event pairs do.

What the numbers are: each op's device time is its simulated duration on the NeuronCore, so
``key_averages()``' device times sum to the simulated busy time of the run (the ``wb.profile``
total less the time the device sat idle, waiting for a launch or a collective). Views cost nothing and
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

from .native_hooks import build_library, native_current_device

__all__ = ["install_profiler", "profiler_installed"]

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "neuron_profiler.cpp"
LIBRARY_NAME = "neuron_workbench_profiler"

_SESSION_FN = ctypes.CFUNCTYPE(None)
_CLOCK_FN = ctypes.CFUNCTYPE(ctypes.c_double)


class _State:
    def __init__(self) -> None:
        self.library = None
        self.callbacks: tuple = ()
        self.timeline = None     # the DeviceTimeline of the session recording now
        self.stack: contextlib.ExitStack | None = None
        self.legacy = None       # the legacy profiler's clock-only DeviceTimeline, while it profiles
        self.legacy_stack: contextlib.ExitStack | None = None


STATE = _State()


def _report(name: str, kind: int, start_ns: float, end_ns: float, launched_ns: int) -> None:
    # The NeuronCore is the issuing thread's current one (a rank's bound core; the autograd
    # engine's worker selects the device of the backward it runs).
    STATE.library.neuron_profiler_op(name.encode(), kind, native_current_device() or 0, start_ns, end_ns,
                                     launched_ns)


def _subscribe(report=None, expired=None):
    """A DeviceTimeline on the device's current target, fed every thread's device ops."""
    from .neuron_module import get_target
    from .profiler_timeline import DeviceTimeline
    target = get_target()
    timeline = DeviceTimeline(target, report, expired=expired)
    stack = contextlib.ExitStack()
    stack.enter_context(recording.recording(timeline, all_threads=True))
    return target, timeline, stack


def _start() -> None:
    """A Kineto session asking for device activity started: simulate every thread's device ops."""
    target, STATE.timeline, STATE.stack = _subscribe(_report)
    STATE.library.neuron_profiler_set_label(f"neuron (simulated {target.name})".encode())


def _stop() -> None:
    if STATE.stack is not None:
        STATE.stack.close()
    STATE.stack = STATE.timeline = None


def _legacy_over() -> bool:
    """The legacy profiler's timeline ends with the profile (checked at the next device op)."""
    if torch.autograd._profiler_enabled():
        return False
    STATE.legacy_stack.close()
    STATE.legacy = STATE.legacy_stack = None
    return True


def _clock_ns() -> float:
    """The simulated clock for the legacy profiler's events: the Kineto session's while one
    records, else a timeline started for the legacy profile (it ends with it)."""
    timeline = STATE.timeline or STATE.legacy
    if timeline is None:
        _, STATE.legacy, STATE.legacy_stack = _subscribe(expired=_legacy_over)
        timeline = STATE.legacy
    return timeline.now_ns


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
    kineto = Path(torch.__file__).parent / "include" / "kineto"
    try:
        library = ctypes.CDLL(build_library(SOURCE, LIBRARY_NAME, cflags=("-DUSE_KINETO", "-DFMT_HEADER_ONLY"),
                                            include_paths=(kineto,)))
    except Exception as error:   # the device works without it; only torch.profiler loses the device
        logger.warning("torch.profiler will not show the neuron device's activity (its Kineto profiler could "
                       "not be built or loaded: %s)", error)
        return False
    library.neuron_profiler_install.argtypes = [_SESSION_FN, _SESSION_FN, _CLOCK_FN]
    library.neuron_profiler_set_label.argtypes = [ctypes.c_char_p]
    library.neuron_profiler_op.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                           ctypes.c_double, ctypes.c_int64]
    STATE.callbacks = (_SESSION_FN(_start), _SESSION_FN(_stop), _CLOCK_FN(_clock_ns))
    library.neuron_profiler_install(*STATE.callbacks)
    STATE.library = library
    return True
