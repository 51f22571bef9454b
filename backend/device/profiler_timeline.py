"""The simulator a ``torch.profiler`` session runs on the ``neuron`` device, and what its rows are
called as device work in a Kineto-style trace (``backend.device.profiler`` reports them).

Kept apart from ``profiler`` so that registering the device (at ``import torch``) does not import
the lowering layer; it is imported when a profiling session starts.
"""
from __future__ import annotations

import time

from backend.lowering import EagerSession
from backend.sim.overlap import COLLECTIVE_PREFIX, WAIT_KIND, is_collective

__all__ = ["DeviceTimeline", "kernel_name", "NOT_DEVICE_WORK", "KIND_CODES"]

NOT_DEVICE_WORK = ("view", WAIT_KIND)   # aliases cost nothing; waits are the stream idling
# What each simulated row becomes in the trace (the OpKind enum of neuron_profiler.cpp).
KIND_CODES = {"compute": 0, "copy": 1, "collective": 2}


def kernel_name(name: str, kind: str, transfer: str | None = None) -> str:
    """What a simulated op is called as device work in a Kineto-style trace. Collectives take
    NCCL's kernel names (``ncclKernel_AllReduce``) and copies CUPTI's (``Memcpy HtoD``), the
    names Holistic Trace Analysis sorts into COMMUNICATION and MEMORY (it knows no others); an
    eager op's kernel is ``neuron::<op>``, apart from the ``aten::<op>`` that launched it; a
    compiled kernel keeps its name."""
    if is_collective(name):
        collective = name.removeprefix(COLLECTIVE_PREFIX)
        return f"ncclKernel_{''.join(part.title() for part in collective.split('_'))} ({name}, simulated)"
    if kind == "transfer":
        direction = {"h2d": " HtoD", "d2h": " DtoH"}.get(transfer, "")     # unknown: no direction
        return f"Memcpy{direction} (neuron, simulated)"
    if kind in ("op", "fallback"):
        kernel = f"neuron::{name.split('::', 1)[-1]}"
        return f"{kernel} (host fallback)" if kind == "fallback" else kernel
    return name


class DeviceTimeline(EagerSession):
    """The simulator a profiling session runs: each op it times goes to ``report(kernel name, kind
    code, start_ns, end_ns, launched_ns)`` at once, on the thread that issued it, and is then
    dropped (the session keeps no rows, so a long profile does not grow it). Compiled kernels
    reach it through ``feed_program``; ``launched_ns`` is the host clock (ns since the epoch)
    when the op was handed to the simulator. Without ``report`` only its clock (``now_ns``)
    advances. ``expired()``, asked before each op, ends the timeline's part: once it returns True
    the op is not timed (whoever passed it unsubscribes the timeline)."""

    def __init__(self, target, report=None, *, expired=None) -> None:
        super().__init__(target, max_events=0)
        self._report = report
        self._expired = expired

    def feed(self, record) -> None:
        if self._expired is not None and self._expired():
            return
        launched = time.time_ns()
        super().feed(record)
        self._drain(record.transfer, launched)

    def feed_program(self, program):
        if self._expired is not None and self._expired():
            return None
        launched = time.time_ns()
        summary = super().feed_program(program)
        self._drain(None, launched)
        return summary

    def _drain(self, transfer: str | None, launched_ns: int) -> None:
        rows = self.trace.ops
        if self._report is not None:
            for row in rows:
                if row.kind not in NOT_DEVICE_WORK:
                    self._report(kernel_name(row.name, row.kind, transfer), _kind_code(row), float(row.start_ns),
                                 float(row.end_ns), launched_ns)
        rows.clear()


def _kind_code(row) -> int:
    if is_collective(row.name):
        return KIND_CODES["collective"]
    return KIND_CODES["copy" if row.kind == "transfer" else "compute"]
