"""Collectives into the op stream: one ``collective::<name>`` record per collective a rank issues.

The lowering (``backend.lowering.collectives``) prices the record on the topology model and runs
it on the collectives lane, so a profile of a rank shows its communication next to its compute.
Nothing is built while nobody records.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from backend.device.collective_scope import in_device_collective
from backend.recording import SIMULATED_DEVICE_TYPES, STREAM, active_sinks, tensor_desc
from backend.sim.descriptors import OpRecord

from .dependencies import track_buffers

__all__ = ["report_collective", "host_tensors"]


def host_tensors(tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], bool]:
    """The host tensors holding the values, and whether any tensor was on a simulated device
    (all are, when a device's functional collective hands its host tensors to the group)."""
    hosts, on_device = [], in_device_collective() and bool(tensors)
    for t in tensors:
        inner = getattr(t, "_inner", None)
        if inner is not None and t.device.type in SIMULATED_DEVICE_TYPES:
            hosts.append(inner)
            on_device = True
        else:
            hosts.append(t)
    return hosts, on_device


def report_collective(collective: str, nbytes: int, ranks: int, topology: str, *,
                      inputs: Sequence[torch.Tensor] = (), outputs: Sequence[torch.Tensor] = (),
                      algorithm: str = "auto") -> int | None:
    """Feed the record of one collective (host tensors in ``inputs`` / ``outputs``) to every sink;
    returns the record's index (what waits for it names), None when nobody records."""
    sinks = active_sinks()
    if not sinks:
        return None
    record = OpRecord(
        index=next(STREAM.counter), name=f"collective::{collective}",
        inputs=tuple(tensor_desc(t) for t in inputs), outputs=tuple(tensor_desc(t) for t in outputs),
        attrs={"collective": collective, "nbytes": int(nbytes), "ranks": int(ranks),
               "topology": topology, "algorithm": algorithm})
    track_buffers(record.index, (*inputs, *outputs))
    for sink, _with_source in sinks:
        sink.feed(record)
    return record.index
