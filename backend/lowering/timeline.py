"""The eager timeline the device layer drives: lower each executed op and simulate it in order on one NeuronCore."""
from __future__ import annotations

from collections.abc import Iterable

from backend.lowering.eager import lower
from backend.sim.descriptors import OpRecord
from backend.sim.ir import Program
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target
from backend.sim.scheduler import Simulator
from backend.sim.trace import OpSummary, Trace

__all__ = ["EagerSession", "simulate"]


class EagerSession:
    """Ops fed one at a time run back to back on one simulated NeuronCore.

    ``feed`` lowers and simulates an eager op; ``feed_program`` runs an already lowered
    Program (a compiled kernel from ``lower_kernel``) on the same timeline.
    """

    def __init__(self, target: str | NeuronConfig = DEFAULT_NEURON_TARGET, max_events: int = 200_000):
        self.target = get_target(target)
        self._sim = Simulator(self.target, max_events=max_events)

    def feed(self, record: OpRecord) -> None:
        self._sim.feed(lower(record, self.target))

    def feed_program(self, program: Program) -> OpSummary:
        return self._sim.feed(program)

    @property
    def trace(self) -> Trace:
        return self._sim.trace

    @property
    def now_ns(self) -> float:
        return self._sim.now_ns

    def reset(self) -> None:
        self._sim.reset()


def simulate(records: Iterable[OpRecord], target: str | NeuronConfig = DEFAULT_NEURON_TARGET, max_events: int = 200_000) -> Trace:
    """Lower and simulate a stream of eager ops; returns their trace."""
    session = EagerSession(target, max_events=max_events)
    for record in records:
        session.feed(record)
    return session.trace
