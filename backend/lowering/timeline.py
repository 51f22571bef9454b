"""The eager timeline the device layer drives: lower each executed op and simulate it in order on one NeuronCore."""
from __future__ import annotations

from collections.abc import Iterable

from backend.lowering.eager import lower
from backend.sim.descriptors import OpRecord
from backend.sim.ir import Program
from backend.sim.overlap import WAIT_OP, WAITS_FOR, CollectiveLane, is_collective
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target
from backend.sim.schedule_cache import SCHEDULES, record_key
from backend.sim.scheduler import Schedule, Simulator
from backend.sim.trace import OpSummary, Trace

__all__ = ["EagerSession", "simulate", "replay", "feed_record"]


def feed_record(sim: Simulator, lane: CollectiveLane, record: OpRecord, program: Program | None,
                schedule: Schedule | None = None) -> None:
    """Run one eager record's lowered ``program`` (and its cached ``schedule``, if any): after the
    collectives it waits for, and on the collectives lane if it is one (``backend.sim.overlap``).
    A ``collective::wait`` has no program."""
    waits = record.attrs.get(WAITS_FOR)
    if waits:
        sim.wait(lane.until(waits))
    if record.name == WAIT_OP:
        return
    if is_collective(record.name):
        lane.finish(record.index, sim.feed(program, schedule, lane=lane, source=record.source).end_ns)
    else:
        sim.feed(program, schedule, source=record.source)


class EagerSession:
    """Ops fed one at a time run back to back on one simulated NeuronCore.

    ``feed`` lowers and simulates an eager op; ``feed_program`` runs an already lowered
    Program (a compiled kernel from ``lower_kernel``) on the same timeline. With
    ``keep_workload`` the session remembers what it was fed (``workload``), so the run can be
    replayed under other assumptions (``replay``, ``backend.sim.sensitivity``); long-lived
    sessions leave it off. An op seen before (same cost inputs, target and assumptions) reuses
    its lowered program and schedule from ``backend.sim.schedule_cache.SCHEDULES``.
    """

    def __init__(self, target: str | NeuronConfig = DEFAULT_NEURON_TARGET, max_events: int = 200_000,
                 keep_workload: bool = False):
        self.target = get_target(target)
        self._sim = Simulator(self.target, max_events=max_events)
        self._lane = CollectiveLane()
        self.workload: list[OpRecord | Program] | None = [] if keep_workload else None
        self._seen = SCHEDULES.entries(self.target)

    def feed(self, record: OpRecord) -> None:
        if self.workload is not None:
            self.workload.append(record)
        if record.name == WAIT_OP:
            feed_record(self._sim, self._lane, record, None)
            return
        key = record_key(record)
        seen = SCHEDULES.get(self._seen, key)
        if seen is None:
            program = lower(record, self.target)
            seen = (program, self._sim.schedule(program) if program.instructions else None)
            SCHEDULES.put(self._seen, key, *seen)
        feed_record(self._sim, self._lane, record, *seen)

    def feed_program(self, program: Program) -> OpSummary:
        if self.workload is not None:
            self.workload.append(program)
        return self._sim.feed(program)

    @property
    def trace(self) -> Trace:
        return self._sim.trace

    def replay_ns(self, target: str | NeuronConfig) -> float:
        """Simulated ns of everything this session was fed, run again on ``target``."""
        if self.workload is None:
            raise RuntimeError("EagerSession kept no workload to replay (make it with keep_workload=True)")
        return replay(self.workload, target)

    @property
    def now_ns(self) -> float:
        return self._sim.now_ns

    def reset(self) -> None:
        self._sim.reset()
        self._lane = CollectiveLane()
        if self.workload is not None:
            self.workload.clear()


def simulate(records: Iterable[OpRecord], target: str | NeuronConfig = DEFAULT_NEURON_TARGET, max_events: int = 200_000) -> Trace:
    """Lower and simulate a stream of eager ops; returns their trace."""
    session = EagerSession(target, max_events=max_events)
    for record in records:
        session.feed(record)
    return session.trace


def replay(workload: Iterable[OpRecord | Program], target: str | NeuronConfig = DEFAULT_NEURON_TARGET) -> float:
    """Simulated ns of a kept workload on ``target``: eager records are lowered again (so lowering
    assumptions apply); compiled kernels keep their lowered program and are re-costed. Records
    that differ only in position (a loop's ops) share one lowered program."""
    sim = Simulator(get_target(target), max_events=0)
    lane = CollectiveLane()
    programs: dict = {}
    for item in workload:
        if not isinstance(item, OpRecord):
            sim.feed(item)
            continue
        program = None
        if item.name != WAIT_OP:
            key = record_key(item)
            program = programs.get(key)
            if program is None:
                program = programs[key] = lower(item, sim.target)
        feed_record(sim, lane, item, program)
    return sim.trace.total_time_ns
