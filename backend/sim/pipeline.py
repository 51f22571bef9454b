"""Pipeline-parallel schedules as timelines: every stage's lane, joined by its sends and receives.

A pipeline schedule (GPipe, 1F1B, interleaved 1F1B, ...) gives each rank an ordered list of
actions: forward (``F``), full backward (``B``), or backward split into input (``I``) and weight
(``W``) gradients, each for one stage and one micro-batch. A rank runs its list in order; an
action starts when the rank is free and its inputs have arrived:

- ``F`` of stage s needs ``F`` of stage s-1 (same micro-batch), plus the activation's transfer
  when the stages sit on different ranks;
- ``B`` / ``I`` of stage s needs its own ``F`` and the ``B`` / ``I`` of stage s+1, plus the
  gradient's transfer;
- ``W`` needs the ``I`` of its stage and micro-batch.

Out of that come the step time, the bubble (the fraction of rank-time no compute runs) and the
exposed point-to-point time (the part of the waits spent on a transfer after its producer had
finished). Costs are inputs: ``compute_ns[(stage, kind)]`` and ``p2p_ns[(stage, kind)]`` (the
transfer *into* the action of that stage and kind), so the model stays torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PipelineAction", "PipelineEvent", "PipelineTimeline", "simulate_pipeline", "gpipe_order",
           "one_f_one_b_order", "KINDS"]

KINDS = ("F", "B", "I", "W")


@dataclass(frozen=True)
class PipelineAction:
    stage: int
    kind: str            # one of KINDS
    microbatch: int


@dataclass(frozen=True)
class PipelineEvent:
    rank: int
    stage: int
    kind: str
    microbatch: int
    start_ns: float
    end_ns: float
    waited_ns: float          # idle on this rank before the action could start
    p2p_exposed_ns: float     # the part of that wait spent on the incoming transfer


@dataclass
class PipelineTimeline:
    """Every rank's actions of one pipeline step, and the costs they were run with.

    ``stand_ins`` maps a stage that was not measured to the measured stage whose costs it took
    (ranks alike: one rank of a fake world measures its own stages only); ``start_ns`` is where
    the step began on the clock of the profile that recorded it."""

    events: list[PipelineEvent] = field(default_factory=list)
    ranks: int = 0
    step_without_p2p_ns: float = 0.0     # the same schedule with instant transfers
    compute_ns: dict = field(default_factory=dict)    # (stage, kind) -> one micro-batch's compute
    p2p_ns: dict = field(default_factory=dict)        # (stage, kind) -> the transfer into that action
    schedule: str = ""
    topology: str = ""
    stand_ins: dict = field(default_factory=dict)
    start_ns: float = 0.0

    @property
    def step_ns(self) -> float:
        return max((e.end_ns for e in self.events), default=0.0)

    @property
    def busy_ns(self) -> float:
        return sum(e.end_ns - e.start_ns for e in self.events)

    @property
    def bubble_fraction(self) -> float:
        """The fraction of the ranks' step time (all ranks together) with no compute running."""
        total = self.ranks * self.step_ns
        return 1.0 - self.busy_ns / total if total else 0.0

    @property
    def schedule_bubble_fraction(self) -> float:
        """The bubble the schedule itself leaves: the same step with instant transfers."""
        total = self.ranks * self.step_without_p2p_ns
        return 1.0 - self.busy_ns / total if total else 0.0

    @property
    def p2p_exposed_ns(self) -> float:
        """How much the transfers lengthen the step: the rest of them hid behind compute."""
        return self.step_ns - self.step_without_p2p_ns

    def summary(self) -> dict:
        return {"step_time": self.step_ns * 1e-9, "bubble_fraction": self.bubble_fraction,
                "schedule_bubble_fraction": self.schedule_bubble_fraction,
                "p2p_exposed_time": self.p2p_exposed_ns * 1e-9, "ranks": self.ranks,
                "stages": len({e.stage for e in self.events}),
                "microbatches": len({e.microbatch for e in self.events}),
                "stages_measured": sorted({e.stage for e in self.events} - set(self.stand_ins))}

    def to_records(self) -> list[dict]:
        return [{"rank": e.rank, "stage": e.stage, "kind": e.kind, "microbatch": e.microbatch,
                 "start_ns": e.start_ns, "end_ns": e.end_ns, "waited_ns": e.waited_ns,
                 "p2p_exposed_ns": e.p2p_exposed_ns} for e in self.events]


def gpipe_order(stages: int, microbatches: int) -> dict[int, list[PipelineAction]]:
    """GPipe, one stage per rank: every forward, then every backward."""
    return {r: [PipelineAction(r, "F", m) for m in range(microbatches)]
            + [PipelineAction(r, "B", m) for m in range(microbatches)] for r in range(stages)}


def one_f_one_b_order(stages: int, microbatches: int) -> dict[int, list[PipelineAction]]:
    """1F1B, one stage per rank, as PyTorch's ``Schedule1F1B`` runs it: ``stages - rank`` forwards
    (at most all), then a backward and a forward in turn, then the backwards left."""
    order = {}
    for r in range(stages):
        warmup = min(microbatches, stages - r)
        acts = [PipelineAction(r, "F", m) for m in range(warmup)]
        for m in range(microbatches - warmup):
            acts += [PipelineAction(r, "B", m), PipelineAction(r, "F", warmup + m)]
        acts += [PipelineAction(r, "B", m) for m in range(microbatches - warmup, microbatches)]
        order[r] = acts
    return order


def _dependencies(action: PipelineAction, stages: int, kinds: set[str]) -> list[tuple[PipelineAction, bool]]:
    """What ``action`` waits for, each with whether the value crosses from another stage."""
    s, m = action.stage, action.microbatch
    backward = "B" if "B" in kinds else "I"
    if action.kind == "F":
        return [(PipelineAction(s - 1, "F", m), True)] if s > 0 else []
    if action.kind in ("B", "I"):
        deps = [(PipelineAction(s, "F", m), False)]
        if s < stages - 1:
            deps.append((PipelineAction(s + 1, backward, m), True))
        return deps
    if action.kind == "W":
        return [(PipelineAction(s, "I", m), False)]
    raise ValueError(f"unknown pipeline action kind {action.kind!r}; known: {', '.join(KINDS)}")


def simulate_pipeline(order: dict[int, list[PipelineAction]], compute_ns: dict[tuple[int, str], float],
                      p2p_ns: dict[tuple[int, str], float] | None = None) -> PipelineTimeline:
    """Run every rank's ``order`` against the others'; raises ``ValueError`` on a schedule that
    deadlocks (an action waits for one no rank will run first)."""
    timeline = _run(order, compute_ns, p2p_ns or {})
    timeline.step_without_p2p_ns = _run(order, compute_ns, {}).step_ns if p2p_ns else timeline.step_ns
    timeline.compute_ns, timeline.p2p_ns = dict(compute_ns), dict(p2p_ns or {})
    return timeline


def _run(order, compute_ns, p2p_ns) -> PipelineTimeline:
    actions = [a for acts in order.values() for a in acts]
    stages = 1 + max((a.stage for a in actions), default=-1)
    kinds = {a.kind for a in actions}
    rank_of = {a: rank for rank, acts in order.items() for a in acts}
    done: dict[PipelineAction, float] = {}
    free = {rank: 0.0 for rank in order}
    next_index = {rank: 0 for rank in order}
    timeline = PipelineTimeline(ranks=len(order))
    remaining = len(actions)
    while remaining:
        progressed = False
        for rank, acts in order.items():
            while next_index[rank] < len(acts):
                action = acts[next_index[rank]]
                deps = _dependencies(action, stages, kinds)
                if any(dep not in done for dep, _ in deps):
                    break
                computed = max([free[rank], *(done[dep] for dep, _ in deps)])
                arrived = max([free[rank], *(done[dep] + (p2p_ns.get((action.stage, action.kind), 0.0)
                                                          if crosses and rank_of.get(dep) != rank else 0.0)
                                             for dep, crosses in deps)])
                duration = compute_ns[(action.stage, action.kind)]
                timeline.events.append(PipelineEvent(rank, action.stage, action.kind, action.microbatch,
                                                     arrived, arrived + duration, arrived - free[rank],
                                                     arrived - computed))
                done[action] = free[rank] = arrived + duration
                next_index[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {rank: acts[next_index[rank]] for rank, acts in order.items() if next_index[rank] < len(acts)}
            raise ValueError(f"the pipeline schedule deadlocks: each rank's next action waits for another's: {stuck}")
    return timeline
