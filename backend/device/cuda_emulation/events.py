"""``torch.cuda.Event`` and ``torch.cuda.Stream`` for the emulated device.

Ops run synchronously on the host, and the simulator lays them out on one stream, so a stream
never has work in flight and an event's timestamp is the simulator's clock when it is recorded:
``start.elapsed_time(end)`` is simulated milliseconds, not host time.
"""
from __future__ import annotations

import contextlib

from .device import active

__all__ = ["Event", "Stream", "current_stream", "default_stream", "stream", "set_stream"]


class Stream:
    """The emulated device's single stream (every Stream object stands for it)."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = active().reported
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
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(Stream)

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device={self.device} (emulated, default stream)>"


class Event:
    """An event stamped with the simulated clock of the emulated device when recorded."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time_ns: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self._time_ns = active().clock_ns()

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
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "unrecorded" if self._time_ns is None else f"at {self._time_ns:.0f} simulated ns"
        return f"<torch.cuda.Event {state} (emulated)>"


def current_stream(device=None) -> Stream:
    return Stream()


default_stream = current_stream


def set_stream(stream: Stream) -> None:
    """Every stream is the default stream."""


@contextlib.contextmanager
def stream(stream: Stream | None):
    """``with torch.cuda.stream(s):`` runs on the one timeline regardless of ``s``."""
    yield
