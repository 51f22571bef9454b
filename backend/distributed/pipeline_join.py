"""A fake world's ``schedule.step()`` as the whole pipeline's step: every stage's lane, joined.

One rank of a fake world runs only its own stages and never waits for its peers, so its trace
has no bubble. While a profile records, the step here also times each compute action of this
rank (forward, backward, the loss on the last stage) on the profile's simulated clock and the
bytes each stage boundary carries, gives every stage this rank does not hold the costs of the
stage it holds at the same place in its own list (ranks alike across the pipeline, as TP and DP
ranks are), and runs the schedule's per-rank order as joined stage timelines
(``backend.sim.pipeline``). The result -- step time, bubble, exposed point-to-point time, one
lane per stage -- is added to the recording trace's ``pipelines`` (``Profile.pipeline``).
"""
from __future__ import annotations

import functools
import logging
import threading
from collections import defaultdict
from dataclasses import replace

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves

from backend.device.event_clock import clock_sessions, session_now_ns
from backend.sim.pipeline import PipelineTimeline, simulate_pipeline
from backend.sim.topology import get_topology

from .replacement import replace_once

__all__ = ["install", "StepCosts", "join_step"]

log = logging.getLogger(__name__)
_ACTIVE = threading.local()          # .costs: the StepCosts of the step this thread runs
# ``torch.distributed.pipelining`` and what reads it are imported when used: ``install`` runs
# while that package finishes importing, possibly inside this module's own import.


def _nbytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


class StepCosts:
    """What one rank's step measured: each action's simulated time (per stage and kind, one
    entry per micro-batch), the loss's, and the bytes into and out of each stage."""

    def __init__(self, session) -> None:
        self.session = session
        self.action_ns: dict[tuple[int, str], list[float]] = defaultdict(list)
        self.loss_ns: dict[int, list[float]] = defaultdict(list)
        self.input_bytes: dict[int, int] = {}
        self.output_bytes: dict[int, int] = {}

    def now(self) -> float:
        return session_now_ns(self.session)

    def compute_ns(self) -> dict[tuple[int, str], float]:
        """One micro-batch's compute per (stage, kind): the mean over the step's micro-batches."""
        return {key: sum(ns) / len(ns) for key, ns in self.action_ns.items()}

    def loss_mean_ns(self) -> dict[int, float]:
        return {stage: sum(ns) / len(ns) for stage, ns in self.loss_ns.items()}


def _timed(kind_of):
    """Wrap a stage method so the step being measured on this thread records its time."""
    def wrap(method):
        @functools.wraps(method)
        def run(stage, *args, **kwargs):
            costs = getattr(_ACTIVE, "costs", None)
            if costs is None:
                return method(stage, *args, **kwargs)
            start = costs.now()
            out = method(stage, *args, **kwargs)
            costs.action_ns[(stage.stage_index, kind_of(*args, **kwargs))].append(costs.now() - start)
            return out
        return run
    return wrap


def _forward_kind(chunk_id, *args, **kwargs) -> str:
    return "F"


def _backward_kind(chunk_id, loss=None, full_backward: bool = True, *args, **kwargs) -> str:
    return "B" if full_backward else "I"


def _weight_kind(chunk_id, *args, **kwargs) -> str:
    return "W"


def _forward_bytes(forward):
    """Also note how many bytes the stage took in (from its neighbour) and handed on."""
    @functools.wraps(forward)
    def run(stage, chunk_id, *args, **kwargs):
        output = forward(stage, chunk_id, *args, **kwargs)
        costs = getattr(_ACTIVE, "costs", None)
        if costs is not None:
            costs.output_bytes[stage.stage_index] = _nbytes(output)
            cached = stage.fwd_cache.get(chunk_id)
            if cached is not None:
                costs.input_bytes[stage.stage_index] = _nbytes(cached[1])
        return output
    return run


def _timed_loss(compute_loss):
    @functools.wraps(compute_loss)
    def run(self, stage, *args, **kwargs):
        costs = getattr(_ACTIVE, "costs", None)
        if costs is None or not (stage.is_last and self._loss_fn is not None):
            return compute_loss(self, stage, *args, **kwargs)
        start = costs.now()
        out = compute_loss(self, stage, *args, **kwargs)
        costs.loss_ns[stage.stage_index].append(costs.now() - start)
        return out
    return run


def _stand_ins(order, held: list[int]) -> dict[int, int]:
    """Stage -> the held stage at the same place in its rank's list (ranks alike)."""
    from .pipeline_orders import rank_of_stage

    stages_of = defaultdict(set)
    for stage, rank in rank_of_stage(order).items():
        stages_of[rank].add(stage)
    held = sorted(held)
    out = {}
    for stages in stages_of.values():
        for place, stage in enumerate(sorted(stages)):
            if stage not in held:
                out[stage] = held[min(place, len(held) - 1)]
    return out


def _boundary_bytes(costs: StepCosts, stand_in: dict[int, int], stages: int) -> dict[int, int]:
    """Bytes crossing each boundary b (stage b -> b+1): measured on either side when this rank
    holds it, else what the stand-in of stage b hands on (or, being a last stage, takes in)."""
    out = {}
    for b in range(stages - 1):
        if b in costs.output_bytes:
            out[b] = costs.output_bytes[b]
        elif b + 1 in costs.input_bytes and b + 1 not in stand_in:
            out[b] = costs.input_bytes[b + 1]
        else:
            h = stand_in.get(b, b)
            out[b] = costs.output_bytes[h] if h < stages - 1 else costs.input_bytes.get(h, 0)
    return out


def join_step(schedule, costs: StepCosts, topology) -> PipelineTimeline:
    """The whole pipeline's step from one rank's measured ``costs``."""
    from .pipeline_orders import rank_of_stage, schedule_order, stage_stride, transfer_costs

    order = schedule_order(schedule)
    measured = costs.compute_ns()
    held = sorted({stage for stage, _ in measured})
    kinds = {kind for _, kind in measured}
    order = {rank: [a for a in actions if a.kind in kinds] for rank, actions in order.items()}
    stages = 1 + max(rank_of_stage(order))
    stand_in = _stand_ins(order, held)
    compute = {(s, k): measured[(stand_in.get(s, s), k)] for s in range(stages) for k in kinds
               if (stand_in.get(s, s), k) in measured}
    for stage, loss_ns in costs.loss_mean_ns().items():     # the last stage's alone: no stand-in has it
        compute[(stage, "F")] += loss_ns
    p2p = transfer_costs(_boundary_bytes(costs, stand_in, stages), order, stage_stride(schedule), topology)
    timeline = simulate_pipeline(order, compute, p2p)
    timeline.schedule, timeline.topology, timeline.stand_ins = type(schedule).__name__, topology.name, stand_in
    return timeline


def _on_fake_world(schedule) -> bool:
    from .pipeline_orders import schedule_stages

    group = schedule_stages(schedule)[0].group or dist.group.WORLD
    return bool(getattr(group, "moves_no_values", False)) and dist.get_world_size(group) > 1


def _joining_step(step):
    @functools.wraps(step)
    def run(self, *args, **kwargs):
        sessions = clock_sessions()
        if not sessions or getattr(_ACTIVE, "costs", None) is not None or not _on_fake_world(self):
            return step(self, *args, **kwargs)
        costs = StepCosts(sessions[-1])
        starts = [session_now_ns(s) for s in sessions]
        _ACTIVE.costs = costs
        try:
            out = step(self, *args, **kwargs)
        finally:
            _ACTIVE.costs = None
        _record(self, costs, sessions, starts)
        return out
    return run


def _record(schedule, costs: StepCosts, sessions, starts) -> None:
    try:
        timeline = join_step(schedule, costs, get_topology(getattr(dist.group.WORLD, "topology", None)))
    except (NotImplementedError, ValueError, KeyError) as e:
        log.warning("%s.step() ran, but its pipeline could not be joined into one timeline: %s",
                    type(schedule).__name__, e)
        return
    for session, start_ns in zip(sessions, starts):
        trace = getattr(session, "trace", None)
        if trace is not None:
            trace.pipelines.append(replace(timeline, start_ns=start_ns))


def install() -> None:
    """Once per process: a fake world's schedule steps join their pipeline while a profile records."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle, _PipelineSchedule
    from torch.distributed.pipelining.stage import _PipelineStageBase

    for schedule_type in (PipelineScheduleSingle, PipelineScheduleMulti):
        replace_once(schedule_type, "step", _joining_step)
    replace_once(_PipelineSchedule, "_maybe_compute_loss", _timed_loss)
    replace_once(_PipelineStageBase, "forward_one_chunk", lambda f: _timed(_forward_kind)(_forward_bytes(f)))
    replace_once(_PipelineStageBase, "backward_one_chunk", _timed(_backward_kind))
    replace_once(_PipelineStageBase, "backward_weight_one_chunk", _timed(_weight_kind))
