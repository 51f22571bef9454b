"""What waits for a collective: the compute that touches its buffers, and ``Work.wait()``.

A collective runs on its own lane (collective cores and DMA rings on Trainium, the NCCL stream
on a GPU), concurrently with the compute issued after it. Compute waits for it only where the
program says so, as on hardware:

- an op that reads or writes a buffer of a collective still in flight (DDP copying a reduced
  bucket into ``.grad``, the optimizer reading a gradient) waits for that collective: its record
  carries ``attrs["waits_for"] = (collective record indices, ...)``;
- ``work.wait()`` (which a synchronous ``dist.all_reduce`` calls for you) makes the compute
  stream wait for the collective: a ``collective::wait`` record says so.

The timelines (``backend.lowering.timeline``, ``backend.sim.gpu.timeline``) turn both into a
wait on the compute stream; the time spent there is the exposed communication. Buffers are
keyed by their storage, so views of a bucket count as the bucket.
"""
from __future__ import annotations

import threading

import torch

from backend.recording import STREAM, active_sinks, record_tagger
from backend.sim.descriptors import OpRecord
from backend.sim.overlap import WAIT_OP, WAITS_FOR

__all__ = ["WAIT_OP", "WAITS_FOR", "track_buffers", "report_wait", "waits_for_collectives"]

# Buffers of collectives a profile may still wait on: storage -> collective record index. Kept
# bounded: the oldest collectives are long finished by the time this many more were issued.
_MAX_TRACKED = 4096
_in_flight: dict[int, int] = {}
_lock = threading.Lock()


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def track_buffers(index: int, tensors) -> None:
    """Remember that collective record ``index`` reads or writes ``tensors`` (host tensors)."""
    with _lock:
        for t in tensors:
            key = _storage_key(t)
            _in_flight.pop(key, None)           # re-inserted last: the dict's order is issue order
            _in_flight[key] = index
        while len(_in_flight) > _MAX_TRACKED:
            del _in_flight[next(iter(_in_flight))]


def _forget(indices) -> None:
    with _lock:
        for key in [k for k, i in _in_flight.items() if i in indices]:
            del _in_flight[key]


@record_tagger
def waits_for_collectives(func, host_inputs) -> dict | None:
    """Tag an op touching a buffer of a collective in flight (the mutated tensor of an in-place
    op is among its inputs). Not while Dynamo traces: a compiled graph's ops are recorded when it
    runs, and tracing into the storage lookup would break the graph."""
    if not _in_flight or torch.compiler.is_compiling():
        return None
    found = {_in_flight.get(_storage_key(t)) for t in host_inputs if isinstance(t, torch.Tensor)}
    found.discard(None)
    return {WAITS_FOR: tuple(sorted(found))} if found else None


def report_wait(indices) -> None:
    """The compute stream waits for the collectives ``indices`` (``Work.wait()``)."""
    indices = tuple(i for i in indices if i is not None)
    if not indices:
        return
    _forget(indices)
    sinks = active_sinks()
    if not sinks:
        return
    record = OpRecord(index=next(STREAM.counter), name=WAIT_OP, inputs=(), outputs=(),
                      attrs={WAITS_FOR: indices})
    for sink, _with_source in sinks:
        sink.feed(record)
