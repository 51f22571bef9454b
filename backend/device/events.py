"""``Event`` and ``Stream`` of the simulated devices (``torch.neuron`` and emulated ``torch.cuda``).

Ops run synchronously on the host, and the simulator lays them out on one stream, so a stream
never has work in flight and an event's timestamp is the simulator's clock when it is recorded:
``start.elapsed_time(end)`` is simulated milliseconds, not host time. Each device module gets
its own subclasses (:func:`stream_api`), bound to its device and its clock (a :class:`Stamp`
source: the time and the timeline it was read from, see ``event_clock``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from backend import recording

from .event_clock import Stamp, elapsed_ms, session_now_ns

__all__ = ["Event", "Stream", "stream_api", "simulated_clock_ns", "recording_session"]


class Stream:
    """The device's single stream (every Stream object stands for it)."""

    device_type = "device"
    _device: Callable[[], torch.device] = staticmethod(lambda: torch.device("cpu"))

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = self._device()
        self.priority = priority

    def synchronize(self) -> None:
        """Nothing is ever in flight."""

    def query(self) -> bool:
        return True

    def wait_stream(self, stream: Stream) -> None:
        """Streams are one timeline, so there is nothing to wait for."""

    def wait_event(self, event: Event) -> None:
        """Streams are one timeline, so there is nothing to wait for."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or self._event_type()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.device_type == self.device_type

    def __hash__(self) -> int:
        return hash((Stream, self.device_type))

    def __repr__(self) -> str:
        return f"<torch.{self.device_type}.Stream device={self.device} (simulated, default stream)>"


class Event:
    """An event stamped with the device's simulated clock when recorded."""

    device_type = "device"
    _clock: Callable[[], Stamp] = staticmethod(lambda: Stamp(0.0, None))

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._stamp: Stamp | None = None

    @property
    def _time_ns(self) -> float | None:
        return None if self._stamp is None else self._stamp.time_ns

    def record(self, stream: Stream | None = None) -> None:
        # Only a timing event reads the clock (as on CUDA): synchronisation events, such as
        # FSDP2's around every all-gather, start no simulation.
        self._stamp = self._clock() if self.enable_timing else Stamp(0.0, None)

    def wait(self, stream: Stream | None = None) -> None:
        """One timeline: nothing to wait for."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Ops finish before they return, so a recorded event is always complete."""

    def elapsed_time(self, end_event: Event) -> float:
        """Simulated milliseconds from this event to ``end_event``, like CUDA's."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._stamp is None or end_event._stamp is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return elapsed_ms(self._stamp, end_event._stamp)

    def __repr__(self) -> str:
        state = "unrecorded" if self._time_ns is None else f"at {self._time_ns:.0f} simulated ns"
        return f"<torch.{self.device_type}.Event {state} (simulated)>"


def stream_api(device_type: str, device: Callable[[], torch.device], clock: Callable[[], Stamp]) -> dict:
    """The stream/event names of a ``torch.cuda``-shaped module for one simulated device."""
    event_type = type("Event", (Event,), {"device_type": device_type, "_clock": staticmethod(clock),
                                          "__module__": f"torch.{device_type}"})
    stream_type = type("Stream", (Stream,), {"device_type": device_type, "_device": staticmethod(device),
                                             "_event_type": event_type, "__module__": f"torch.{device_type}"})

    def current_stream(device=None) -> Stream:
        return stream_type()

    def set_stream(stream: Stream) -> None:
        """Every stream is the default stream."""

    @contextlib.contextmanager
    def stream(stream: Stream | None):
        """``with torch.<device>.stream(s):`` runs on the one timeline regardless of ``s``."""
        yield

    return {"Event": event_type, "Stream": stream_type, "current_stream": current_stream,
            "default_stream": current_stream, "set_stream": set_stream, "stream": stream}


def recording_session():
    """The simulator session recording device ops now, if any (it has the clock)."""
    for sink, _ in recording.active_sinks():
        if hasattr(sink, "trace") or hasattr(sink, "now_ns"):
            return sink
    return None


def simulated_clock_ns(session=None) -> float:
    """Simulated time of ``session`` (default: the recording one): when everything issued so
    far has finished."""
    session = session if session is not None else recording_session()
    if session is None:
        raise RuntimeError(
            "no simulator is recording this device's ops, so events have no clock: run inside "
            "workbench.profile(...), or enable CUDA emulation with a session")
    return session_now_ns(session)
