"""What a ``torch.distributed.pipelining`` schedule tells the pipeline model: each rank's compute
actions in the order it runs them, where the stages sit, and what their sends and receives cost.

The joined timeline itself is ``backend.sim.pipeline``; this module reads PyTorch's schedule
objects for it (``wb.pipeline_step`` and a fake world's ``schedule.step()`` both use it).
"""
from __future__ import annotations

import torch.distributed as dist
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from backend.sim.collectives import collective_cost
from backend.sim.pipeline import PipelineAction, gpipe_order, one_f_one_b_order
from backend.sim.topology import Topology

__all__ = ["schedule_order", "schedule_stages", "stage_stride", "rank_of_stage", "transfer_costs"]

_COMPUTE = frozenset("FBIW")
_SINGLE_STAGE_ORDERS = {ScheduleGPipe: gpipe_order, Schedule1F1B: one_f_one_b_order}


def schedule_order(schedule) -> dict[int, list[PipelineAction]]:
    """The compute actions of each rank of a PyTorch pipeline schedule, in the order it runs them.

    Multi-stage schedules run their ``pipeline_order``. Single-stage ones run code instead, and
    their ``pipeline_order`` (drawn for display) can disagree with it -- ``Schedule1F1B``'s lists
    micro-batches 1..m for the last rank -- so theirs is the order their code runs."""
    if isinstance(schedule, PipelineScheduleSingle):
        order_of = _SINGLE_STAGE_ORDERS.get(type(schedule))
        if order_of is None:
            raise NotImplementedError(f"simulating {type(schedule).__name__} is not supported; supported: "
                                      f"{', '.join(t.__name__ for t in _SINGLE_STAGE_ORDERS)} and multi-stage schedules")
        return order_of(schedule._num_stages, schedule._n_microbatches)
    order = getattr(schedule, "pipeline_order", None)
    if not order:
        raise ValueError(f"{type(schedule).__name__} publishes no pipeline_order to simulate")
    return {rank: [PipelineAction(a.stage_index, a.computation_type.value, a.microbatch_index)
                   for a in actions if a is not None and a.computation_type.value in _COMPUTE]
            for rank, actions in order.items()}


def schedule_stages(schedule) -> list:
    """The ``PipelineStage`` objects this rank's schedule runs."""
    return [schedule._stage] if isinstance(schedule, PipelineScheduleSingle) else list(schedule._stages)


def rank_of_stage(order: dict[int, list[PipelineAction]]) -> dict[int, int]:
    """Stage index -> the pipeline rank that runs it."""
    return {a.stage: rank for rank, actions in order.items() for a in actions}


def stage_stride(schedule) -> int:
    """Ranks between neighbouring pipeline ranks in the schedule's group (1 outside a group):
    a ``DeviceMesh``'s "pp" dimension over TP x DP ranks puts them far apart."""
    if not dist.is_initialized():
        return 1
    ranks = dist.get_process_group_ranks(schedule_stages(schedule)[0].group or dist.group.WORLD)
    return ranks[1] - ranks[0] if len(ranks) > 1 else 1


def transfer_costs(boundary_bytes: dict[int, int], order: dict[int, list[PipelineAction]], stride: int,
                   topology: Topology) -> dict[tuple[int, str], float]:
    """``(stage, kind) -> ns`` of the transfer into that action: the activation of boundary
    ``b`` (stage b -> b+1) into ``(b+1, "F")``, its gradient back into ``(b, "B")`` / ``(b, "I")``.

    A hop spans the ranks between the two stages' ranks (``stride`` apart per pipeline rank), so
    the topology decides whether it stays on a node; stages on the same rank move nothing."""
    rank_of = rank_of_stage(order)
    costs = {}
    for b, nbytes in boundary_bytes.items():
        distance = abs(rank_of[b + 1] - rank_of[b]) * stride
        hop_ns = collective_cost("send_recv", nbytes, distance + 1, topology).time_ns if distance else 0.0
        costs[(b + 1, "F")] = costs[(b, "B")] = costs[(b, "I")] = hop_ns
    return costs
