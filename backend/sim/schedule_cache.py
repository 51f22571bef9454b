"""Ops seen before: an equal op is neither lowered nor scheduled again.

A model repeats the same few dozen ops (every layer of a transformer runs the same shapes), and
an eager program starts with every engine, port and DMA queue free, so its lowered Program and
its ``Schedule`` (timing relative to its start) depend only on the op's cost inputs, the target
and the modelling assumptions. The cache keeps both per target, keyed by ``record_key``; a hit
costs a dictionary lookup plus shifting the schedule's events, whatever the tensor sizes.
Assumption overrides (sensitivity passes) clear it. Compiled kernels are not cached here: what
stays in SBUF between neighbouring kernels makes two equal kernels cost differently.
"""
from __future__ import annotations

from collections import OrderedDict

from backend.sim import assumptions
from backend.sim.descriptors import OpRecord
from backend.sim.ir import Program
from backend.sim.presets import NeuronConfig
from backend.sim.scheduler import Schedule

__all__ = ["ScheduleCache", "SCHEDULES", "record_key"]


def record_key(record: OpRecord) -> tuple:
    """What an eager op's cost depends on: everything but its position and source line."""
    return (record.name, record.inputs, record.outputs, repr(record.attrs), record.is_view, record.fallback,
            record.transfer)


class ScheduleCache:
    """``(program, schedule)`` entries per target, at most ``maxsize`` each (the oldest go first).

    ``schedule`` is None for a program without instructions (a view). ``enabled = False``
    makes every lookup miss (to compare against scheduling everything afresh).
    """

    def __init__(self, maxsize: int = 4096, max_targets: int = 16):
        self.maxsize, self.max_targets = maxsize, max_targets
        self.enabled = True
        self.hits = self.misses = 0
        self._by_target: OrderedDict[NeuronConfig, dict] = OrderedDict()
        assumptions.on_change(self.clear)

    def entries(self, target: NeuronConfig) -> dict:
        """The entries of one target (a session looks this up once, hashing the target once)."""
        entries = self._by_target.get(target)
        if entries is None:
            entries = self._by_target[target] = {}
            while len(self._by_target) > self.max_targets:
                self._by_target.popitem(last=False)
        return entries

    def get(self, entries: dict, key: tuple) -> tuple[Program, Schedule | None] | None:
        hit = entries.get(key) if self.enabled else None
        if hit is None:
            self.misses += 1
            return None
        self.hits += 1
        return hit

    def put(self, entries: dict, key: tuple, program: Program, schedule: Schedule | None) -> None:
        if not self.enabled:
            return
        entries[key] = (program, schedule)
        if len(entries) > self.maxsize:
            del entries[next(iter(entries))]

    def clear(self) -> None:
        """Forget every entry (the target's entries objects stay valid, emptied)."""
        for entries in self._by_target.values():
            entries.clear()
        self.hits = self.misses = 0


# The process-wide cache eager sessions share: profiling the same model twice costs once.
SCHEDULES = ScheduleCache()
