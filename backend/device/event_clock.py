"""The simulated clock ``neuron`` timing events read, inside a profile or not.

A CUDA event pair times whatever ran between the two records. Here time is simulated, so an
event reads the clock of the simulator session recording the device's ops: the innermost
profile's (``wb.profile``) when one records this thread, else a background timeline that a
timing event starts on its first record. The background timeline (an ``EagerSession`` on the
selected target, subscribed to every thread's ops) lives as long as some event stamped from it
does, so code that stops timing stops paying for simulation.

Each stamp names the timeline it was read from; ``elapsed_time`` between stamps of different
timelines (one event inside a profile, one outside) has no meaning and raises.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import NamedTuple

from backend import recording

__all__ = ["Stamp", "Timeline", "stamp", "clock_sessions", "elapsed_ms", "NativeEvents", "NATIVE_EVENTS"]


class Stamp(NamedTuple):
    time_ns: float
    timeline: object        # what the time was read from; kept alive by the event holding it


class Timeline:
    """A background simulator session recording every thread's device ops while it lives."""

    def __init__(self, target) -> None:
        from backend.lowering import EagerSession

        self.session = EagerSession(target, max_events=0)
        entry = recording.SinkEntry(self.session, False, None)
        recording.STREAM.subscribe(entry)
        weakref.finalize(self, _unsubscribe, entry)

    def now_ns(self) -> float:
        return self.session.now_ns


def _unsubscribe(entry) -> None:
    try:
        recording.STREAM.unsubscribe(entry)
    except ValueError:      # already dropped (recording.STREAM.reset in tests)
        pass


class _Background:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = None      # weakref to the live Timeline

    def timeline(self, target) -> Timeline:
        with self._lock:
            timeline = self._current() if self._current is not None else None
            if timeline is None:
                timeline = Timeline(target)
                self._current = weakref.ref(timeline)
            return timeline

    def owns(self, sink) -> bool:
        timeline = self._current() if self._current is not None else None
        return timeline is not None and timeline.session is sink


BACKGROUND = _Background()


def clock_sessions() -> list:
    """Sessions recording this thread's device ops that keep a clock, innermost last,
    the background timeline's excluded."""
    return [sink for sink, _ in recording.active_sinks()
            if (hasattr(sink, "trace") or hasattr(sink, "now_ns")) and not BACKGROUND.owns(sink)]


def session_now_ns(session) -> float:
    """When everything ``session`` was fed so far has finished."""
    now = getattr(session, "now_ns", None)
    if now is not None:
        return float(now() if callable(now) else now)
    ops = session.trace.ops
    return ops[-1].end_ns if ops else 0.0


def stamp(target) -> Stamp:
    """The simulated time now, from the innermost recording profile, else the background
    timeline on ``target`` (a callable giving the selected target, started if needed)."""
    sessions = clock_sessions()
    if sessions:
        return Stamp(session_now_ns(sessions[-1]), sessions[-1])
    timeline = BACKGROUND.timeline(target())
    return Stamp(timeline.now_ns(), timeline)


def elapsed_ms(start: Stamp, end: Stamp) -> float:
    if start.timeline is not end.timeline:
        raise RuntimeError(
            "The two events were recorded on different simulated timelines (one inside a "
            "profile, one outside it, or in two profiles); record both in the same one.")
    return (end.time_ns - start.time_ns) / 1e6


class NativeEvents:
    """The stamps of C++ events (``torch.Event("neuron", enable_timing=True)``), by the handle
    each event keeps; released when the event is destroyed."""

    def __init__(self) -> None:
        self._stamps: dict[int, Stamp] = {}
        self._handles = itertools.count(1)

    def stamp(self, previous: int, target) -> int:
        self.release(previous)
        handle = next(self._handles)
        self._stamps[handle] = stamp(target)
        return handle

    def elapsed_ms(self, start: int, end: int) -> float:
        try:
            return elapsed_ms(self._stamps[start], self._stamps[end])
        except RuntimeError:
            return float("nan")

    def release(self, handle: int) -> None:
        self._stamps.pop(handle, None)

    def __len__(self) -> int:
        return len(self._stamps)


NATIVE_EVENTS = NativeEvents()
