"""Memory history and snapshots of the simulated devices, in ``torch.cuda.memory``'s format.

``torch.neuron.memory._record_memory_history()`` / ``_snapshot()`` (and the emulated
``torch.cuda.memory``'s) produce the dictionary ``torch.cuda.memory._snapshot()`` does, so
PyTorch's own tools read it: ``torch.cuda._memory_viz`` (``trace_plot``, ``segment_plot``,
``segsum``, ``trace``) and the pytorch.org/memory_viz page.

The device has no caching allocator: each storage the memory books count is one segment holding
one block, at the host storage's address (what ``untyped_storage().data_ptr()`` reports), the
segment sized as the books reserve it (CUDA's rounding) and the block's ``requested_size`` the
storage's bytes. With history on, every storage's allocation and free is a trace entry
(``segment_alloc`` + ``alloc``, ``free_requested`` + ``free_completed`` + ``segment_free``) with
the Python stack that made it.
"""
from __future__ import annotations

import sys
import time
from collections import deque

__all__ = ["MemoryHistory", "HISTORIES", "record_memory_history", "snapshot"]

_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot")
# Frames of the device layer's own bookkeeping are left out of the recorded stacks.
_OWN_FILES = ("backend/device/memory.py", "backend/device/memory_history.py", "backend/device/tensor.py",
              "backend/device/dispatch.py", "backend/device/factories.py")


def _python_frames() -> list[dict]:
    """The Python stack, innermost frame first (as CUDA's snapshots list them)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.replace("\\", "/").endswith(_OWN_FILES):
            frames.append({"filename": filename, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


class MemoryHistory:
    """What ``_record_memory_history`` asked to keep for one device type."""

    def __init__(self, enabled: str = "all", context: str | None = "all", max_entries: int = sys.maxsize,
                 skip_actions=None) -> None:
        if enabled not in ("state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        unknown = set(skip_actions or ()) - set(_ACTIONS)
        if unknown:
            raise ValueError(f"unknown actions in skip_actions: {sorted(unknown)}; valid: {list(_ACTIONS)}")
        self.enabled = enabled
        self.context = context
        self.skip = frozenset(skip_actions or ())
        self.traces: dict[int, deque] = {}          # device index -> its trace entries
        self.max_entries = max_entries
        self.frames: dict[tuple[int, int], list] = {}   # (device, address) -> allocation stack

    def _trace(self, device: int) -> deque:
        trace = self.traces.get(device)
        if trace is None:
            maxlen = None if self.max_entries >= sys.maxsize else self.max_entries
            trace = self.traces[device] = deque(maxlen=maxlen)
        return trace

    def _append(self, device: int, action: str, address: int, size: int, frames: list, **extra) -> None:
        if self.enabled == "all" and action not in self.skip:
            self._trace(device).append({"action": action, "addr": address, "size": size, "stream": 0,
                                        "time_us": time.time_ns() // 1000, "frames": frames, **extra})

    def on_alloc(self, device: int, address: int, reserved: int) -> None:
        frames = _python_frames() if self.context is not None else []
        if self.context is not None:
            self.frames[(device, address)] = frames
        trace_frames = frames if self.context in ("alloc", "all") else []
        self._append(device, "segment_alloc", address, reserved, trace_frames)
        self._append(device, "alloc", address, reserved, trace_frames)

    def on_free(self, device: int, address: int, reserved: int) -> None:
        self.frames.pop((device, address), None)
        frames = _python_frames() if self.context == "all" else []
        for action in ("free_requested", "free_completed", "segment_free"):
            self._append(device, action, address, reserved, frames)

    def on_oom(self, device: int, requested: int, free: int) -> None:
        self._append(device, "oom", 0, requested, _python_frames() if self.context is not None else [],
                     device_free=free)


HISTORIES: dict[str, MemoryHistory] = {}


def record_memory_history(device_type: str, enabled="all", context="all", stacks="all",
                          max_entries: int = sys.maxsize, clear_history: bool = False, skip_actions=None,
                          **unused) -> None:
    """Start (``enabled`` "state" or "all") or stop (None) recording ``device_type``'s memory
    history, as ``torch.cuda.memory._record_memory_history``. ``stacks`` is accepted for
    compatibility: the device has Python frames only."""
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    previous = HISTORIES.pop(device_type, None)
    if enabled is None:
        return
    history = MemoryHistory(enabled, context, max_entries, skip_actions)
    if previous is not None and not clear_history:
        history.frames = previous.frames
        for device, trace in previous.traces.items():
            history._trace(device).extend(trace)
    HISTORIES[device_type] = history


def snapshot(device_type: str, pools) -> dict:
    """The ``torch.cuda.memory._snapshot()`` dictionary of ``pools`` ({device index: books})."""
    history = HISTORIES.get(device_type)
    segments = []
    for index, pool in sorted(pools.items()):
        for address, (_, nbytes) in pool.live_storages():
            reserved = pool.reserved_size(nbytes)
            frames = history.frames.get((index, address), []) if history is not None else []
            block = {"address": address, "size": reserved, "requested_size": nbytes,
                     "state": "active_allocated", "frames": frames}
            segments.append({"device": index, "address": address, "total_size": reserved,
                             "allocated_size": reserved, "active_size": reserved, "requested_size": nbytes,
                             "stream": 0, "segment_type": "small" if reserved <= 1 << 20 else "large",
                             "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
                             "blocks": [block]})
    count = max(pools, default=-1) + 1
    traces = [list(history.traces.get(i, ())) if history is not None else [] for i in range(count)]
    if history is not None:
        for index in range(count):
            history._append(index, "snapshot", 0, 0, [])
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_NO_CUDA_MEMORY_CACHING": True}}
