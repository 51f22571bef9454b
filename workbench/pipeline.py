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

import torch

from backend.distributed import pipeline_orders
from backend.distributed.pipeline_orders import schedule_order, transfer_costs
from backend.distributed.placement import rank_topology
from backend.sim.pipeline import simulate_pipeline
from backend.sim.topology import get_topology
from workbench.pipeline_steps import PipelineStep

__all__ = ["pipeline_step", "PipelineStep", "schedule_order"]


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
    stride = pipeline_orders.stage_stride(schedule) if stage_stride is None else stage_stride
    p2p = transfer_costs(sent, order, stride, topo)
    missing = needed - compute.keys()
    if missing:
        raise ValueError(f"the schedule runs {sorted(missing)} but those stages produced no gradient "
                         f"(give the schedule a loss_fn and the stages parameters that require grad)")
    timeline = simulate_pipeline(order, compute, {k: v for k, v in p2p.items() if k in needed})
    timeline.schedule, timeline.topology = type(schedule).__name__, topo.name
    return PipelineStep(timeline)


def _group_topology() -> str | None:
    import torch.distributed as dist

    if dist.is_initialized():
        return getattr(dist.group.WORLD, "topology", None)
    return None
