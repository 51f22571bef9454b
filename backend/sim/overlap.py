"""Collectives overlapping compute: the lane they run on, what waits for them, the breakdown.

Collectives run on their own lane -- the collective cores and DMA rings of a Trainium chip,
the NCCL stream of a GPU -- so compute issued after a collective runs alongside it. A collective
starts once the compute issued before it has finished (its data is ready; NCCL's stream waits on
an event of the compute stream the same way) and the lane is free. Compute waits for a
collective only where the program does: an op reading or writing its buffers, or
``Work.wait()``; such a record names the collectives in ``attrs["waits_for"]`` (a
``collective::wait`` record is nothing but that wait). The wait becomes a row of kind ``"wait"``
on the compute stream (``Trace.add_wait``): exposed communication.

:func:`communication_breakdown` splits a trace's time into compute, communication and exposed
communication (communication during which no compute runs). Pure Python, below ``trace``.
"""
from __future__ import annotations

__all__ = ["COLLECTIVE_PREFIX", "WAIT_OP", "WAITS_FOR", "WAIT_KIND", "CollectiveLane", "is_collective",
           "communication_breakdown"]

COLLECTIVE_PREFIX = "collective::"
WAIT_OP = COLLECTIVE_PREFIX + "wait"
WAITS_FOR = "waits_for"
WAIT_KIND = "wait"


def is_collective(name: str) -> bool:
    """A collective that moves data (not the wait for one)."""
    return name.startswith(COLLECTIVE_PREFIX) and name != WAIT_OP


class CollectiveLane:
    """When the lane is free, and when each collective issued on it finishes (by record index)."""

    def __init__(self) -> None:
        self.free_ns = 0.0
        self._ends: dict[int, float] = {}

    def start(self, ready_ns: float) -> float:
        """When a collective whose data is ready at ``ready_ns`` starts."""
        return max(ready_ns, self.free_ns)

    def finish(self, index: int, end_ns: float) -> None:
        self.free_ns = max(self.free_ns, end_ns)
        self._ends[index] = end_ns

    def until(self, indices) -> float:
        """When the collectives ``indices`` have all finished (0 for unknown or already awaited ones:
        once waited for, a collective holds nobody up again)."""
        return max((self._ends.pop(i, 0.0) for i in indices), default=0.0)


def _union_ns(intervals) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _minus(spans, cover) -> float:
    """Length of the union ``spans`` outside the union ``cover`` (both sorted, disjoint)."""
    outside, j = 0.0, 0
    for start, end in spans:
        cursor = start
        while j < len(cover) and cover[j][1] <= cursor:
            j += 1
        k = j
        while k < len(cover) and cover[k][0] < end:
            if cover[k][0] > cursor:
                outside += cover[k][0] - cursor
            cursor = max(cursor, cover[k][1])
            k += 1
        outside += max(0.0, end - cursor)
    return outside


def communication_breakdown(ops) -> dict:
    """``compute_time_ns`` (time some compute op runs), ``communication_time_ns`` (time some
    collective runs) and ``exposed_communication_time_ns`` (collectives with no compute beside them)."""
    compute = _union_ns((op.start_ns, op.end_ns) for op in ops
                        if op.kind not in ("view", WAIT_KIND) and not op.name.startswith(COLLECTIVE_PREFIX))
    comm = _union_ns((op.start_ns, op.end_ns) for op in ops if is_collective(op.name))
    return {"compute_time_ns": _length(compute), "communication_time_ns": _length(comm),
            "exposed_communication_time_ns": _minus(comm, compute)}
