"""``wb.pipeline_step``: the step time, bubble and point-to-point time of a pipeline schedule.

One simulated rank never waits for its peers, so a pipeline's bubble cannot appear in its trace.
When the ranks of the pipeline are alike across data and tensor parallelism, this one process
runs every stage of one pipeline instead: each stage's module once forward and once backward on a
micro-batch (with values or timing-only), the activation of each stage boundary priced as a
send/recv on the topology, and the PyTorch schedule's own per-rank action order
(``schedule.pipeline_order``) run as joined stage timelines (``backend.sim.pipeline``)::

    fake_world(8, topology="trn1")                       # or a real job's rank 0
    stage = PipelineStage(stages[0], 0, len(stages), "neuron")
    schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=F.cross_entropy)
    step = wb.pipeline_step(schedule, stages, x, target=y)
    step.summary       # step_time, bubble_fraction, p2p_exposed_time, ...
    step.figure()      # one lane per stage
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from backend.distributed.placement import rank_topology
from backend.sim.collectives import collective_cost
from backend.sim.pipeline import PipelineAction, PipelineTimeline, gpipe_order, one_f_one_b_order, simulate_pipeline
from backend.sim.topology import get_topology

__all__ = ["pipeline_step", "PipelineStep", "schedule_order"]

_COMPUTE = {"F": "F", "B": "B", "I": "I", "W": "W"}


@dataclass
class PipelineStep:
    """A simulated pipeline step: ``timeline`` holds every stage's lane."""

    timeline: PipelineTimeline
    compute_ns: dict            # (stage, "F" | "B") -> simulated time of one micro-batch
    p2p_ns: dict                # (stage, "F" | "B") -> the transfer into that action
    schedule: str
    topology: str

    @property
    def summary(self) -> dict:
        return {"schedule": self.schedule, "topology": self.topology, **self.timeline.summary()}

    def to_records(self) -> list[dict]:
        return self.timeline.to_records()

    def figure(self):
        """The schedule as a Gantt chart: one lane per stage, forward and backward coloured apart."""
        import plotly.graph_objects as go

        fig = go.Figure()
        colours = {"F": "#4C78A8", "B": "#F58518", "I": "#F58518", "W": "#54A24B"}
        for kind in sorted({e.kind for e in self.timeline.events}):
            events = [e for e in self.timeline.events if e.kind == kind]
            fig.add_bar(y=[f"stage {e.stage}" for e in events], x=[(e.end_ns - e.start_ns) * 1e-3 for e in events],
                        base=[e.start_ns * 1e-3 for e in events], orientation="h", name=kind,
                        marker_color=colours[kind], text=[str(e.microbatch) for e in events],
                        hovertemplate="%{y} " + kind + " micro-batch %{text}<br>%{base:.1f} us + %{x:.1f} us")
        s = self.summary
        fig.update_layout(title=f"{self.schedule}: step {s['step_time'] * 1e3:.3f} ms, bubble "
                                f"{s['bubble_fraction']:.1%}, exposed p2p {s['p2p_exposed_time'] * 1e6:.1f} us",
                          xaxis_title="time (us)", barmode="overlay", yaxis_autorange="reversed")
        return fig


def schedule_order(schedule) -> dict[int, list[PipelineAction]]:
    """The compute actions of each rank of a PyTorch pipeline schedule, in the order it runs them.

    Multi-stage schedules run their ``pipeline_order``. Single-stage ones run code instead, and
    their ``pipeline_order`` (drawn for display) can disagree with it -- ``Schedule1F1B``'s lists
    micro-batches 1..m for the last rank -- so theirs is the order their code runs."""
    singles = {ScheduleGPipe: gpipe_order, Schedule1F1B: one_f_one_b_order}
    if isinstance(schedule, PipelineScheduleSingle):
        order_of = singles.get(type(schedule))
        if order_of is None:
            raise NotImplementedError(f"simulating {type(schedule).__name__} is not supported; supported: "
                                      f"{', '.join(t.__name__ for t in singles)} and multi-stage schedules")
        return order_of(schedule._num_stages, schedule._n_microbatches)
    order = getattr(schedule, "pipeline_order", None)
    if not order:
        raise ValueError(f"{type(schedule).__name__} publishes no pipeline_order to simulate")
    return {rank: [PipelineAction(a.stage_index, _COMPUTE[a.computation_type.value], a.microbatch_index)
                   for a in actions if a is not None and a.computation_type.value in _COMPUTE]
            for rank, actions in order.items()}


def _simulated_ns(fn) -> tuple[float, object]:
    from workbench.session import profile

    with profile(source=False) as prof:
        result = fn()
    return prof.trace.total_time_ns, result


def _measure_stages(stages, microbatch: tuple, target, loss_fn):
    """Forward and backward time of each stage on one micro-batch, and the bytes it sends on.

    The backward is measured into empty ``.grad`` (the stages' own gradients are put back after):
    the same answer on every call; accumulating into ``.grad``, as later micro-batches do, is
    one elementwise add per parameter and is not counted."""
    params = [p for module in stages for p in module.parameters()]
    kept = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        return _forward_backward_times(stages, microbatch, target, loss_fn)
    finally:
        for p, grad in zip(params, kept):
            p.grad = grad


def _forward_backward_times(stages, microbatch: tuple, target, loss_fn):
    compute, sent = {}, {}
    inputs = microbatch
    for s, module in enumerate(stages):
        last = s == len(stages) - 1

        def forward(module=module, inputs=inputs, last=last):
            out = module(*inputs)
            return loss_fn(out, target) if last and loss_fn is not None else out
        compute[(s, "F")], out = _simulated_ns(forward)
        if not last:
            sent[s] = out.numel() * out.element_size()
        if out.requires_grad:
            compute[(s, "B")], _ = _simulated_ns(lambda out=out: out.backward(torch.ones_like(out)))
        inputs = (out.detach().requires_grad_(out.is_floating_point()),)
    return compute, sent


def pipeline_step(schedule, stages, *args, target=None, topology=None, stage_stride: int | None = None) -> PipelineStep:
    """Simulate one ``schedule.step(*args, target=target)`` of the whole pipeline.

    ``schedule``: a ``torch.distributed.pipelining`` schedule (``ScheduleGPipe``, ``Schedule1F1B``,
    ``ScheduleInterleaved1F1B``, ...): its micro-batch count, loss function and per-rank order.
    ``stages``: every stage's module, in stage order (each on the device, as its rank holds it).
    ``args`` / ``target``: the full batch, split into micro-batches along dim 0 as the schedule
    splits it. ``topology``: what prices the transfers, one rank per NeuronCore or GPU (default:
    the process group's);
    ``stage_stride``: ranks between neighbouring stages, which decides whether a transfer crosses
    nodes (default: read from the stage's process group, e.g. a DeviceMesh's "pp" dimension).
    """
    if len(stages) < 2:
        raise ValueError(f"a pipeline needs at least two stages, got {len(stages)}")
    order = schedule_order(schedule)
    microbatches = schedule._n_microbatches
    first = tuple(a.tensor_split(microbatches)[0] if isinstance(a, torch.Tensor) else a for a in args)
    first_target = target.tensor_split(microbatches)[0] if isinstance(target, torch.Tensor) else target
    needed = {(a.stage, a.kind) for acts in order.values() for a in acts}
    if len(stages) != 1 + max(s for s, _ in needed):
        raise ValueError(f"{type(schedule).__name__} runs {1 + max(s for s, _ in needed)} stages; got {len(stages)} modules")
    if needed & {(s, k) for s in range(len(stages)) for k in ("I", "W")}:
        raise NotImplementedError("schedules that split the backward (I / W actions) are not simulated yet")
    compute, sent = _measure_stages(stages, first, first_target, schedule._loss_fn)
    topo = rank_topology(topology) if topology is not None else get_topology(_group_topology())
    stage_stride = _stage_stride(schedule) if stage_stride is None else stage_stride
    p2p = {}
    for s, nbytes in sent.items():
        hop_ns = collective_cost("send_recv", nbytes, stage_stride + 1, topo).time_ns
        p2p[(s + 1, "F")] = hop_ns              # the activation into the next stage's forward
        p2p[(s, "B")] = hop_ns                  # its gradient back into this stage's backward
    missing = needed - compute.keys()
    if missing:
        raise ValueError(f"the schedule runs {sorted(missing)} but those stages produced no gradient "
                         f"(give the schedule a loss_fn and the stages parameters that require grad)")
    return PipelineStep(simulate_pipeline(order, compute, p2p), compute, p2p, type(schedule).__name__, topo.name)


def _stage_stride(schedule) -> int:
    """Ranks between neighbouring stages in the schedule's pipeline group (1 outside a group)."""
    import torch.distributed as dist

    stage = getattr(schedule, "_stage", None) or schedule._stages[0]
    if not dist.is_initialized():
        return 1
    ranks = dist.get_process_group_ranks(stage.group or dist.group.WORLD)
    return ranks[1] - ranks[0] if len(ranks) > 1 else 1


def _group_topology() -> str | None:
    import torch.distributed as dist

    if dist.is_initialized():
        return getattr(dist.group.WORLD, "topology", None)
    return None
