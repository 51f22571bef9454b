"""``wb.pipeline_step``: a PyTorch pipeline schedule built on a fake world, every stage run in
this process (timing-only), the stages' timelines joined through their sends and receives."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from torch.distributed.device_mesh import init_device_mesh

import workbench as wb
from backend.sim.collectives import collective_cost
from backend.sim.pipeline import simulate_pipeline
from backend.sim.topology import per_core
from workbench.distributed import fake_world
from workbench.pipeline import pipeline_step, schedule_order

STAGES, WIDTH, BATCH = 4, 256, 64


@pytest.fixture
def pipeline_world(neuron):
    fake_world(STAGES * 32, topology="trn1")      # 4 stages x 32 NeuronCore ranks of TP/DP each
    mesh = init_device_mesh("neuron", (STAGES, 32), mesh_dim_names=("pp", "tp"))
    yield mesh["pp"].get_group()
    dist.destroy_process_group()


def _schedule(pp_group, schedule_type, stage_module, microbatches):
    stage = PipelineStage(stage_module, 0, STAGES, torch.device("neuron"), group=pp_group)
    return schedule_type(stage, n_microbatches=microbatches, loss_fn=F.mse_loss)


def _stages_and_batch():
    stages = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()).to("neuron") for _ in range(STAGES)]
    return stages, torch.randn(BATCH, WIDTH, device="neuron"), torch.randn(BATCH, WIDTH, device="neuron")


@pytest.mark.parametrize("schedule_type", [ScheduleGPipe, Schedule1F1B])
@pytest.mark.parametrize("microbatches", [4, 8])
def test_pytorch_schedules_with_exact_equal_stages_have_the_formula_bubble(pipeline_world, schedule_type, microbatches):
    schedule = _schedule(pipeline_world, schedule_type, torch.nn.Linear(2, 2).to("neuron"), microbatches)
    costs = {(s, k): t for s in range(STAGES) for k, t in (("F", 1000.0), ("B", 2000.0))}
    timeline = simulate_pipeline(schedule_order(schedule), costs)
    p, m = STAGES, microbatches
    assert timeline.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert timeline.step_ns == pytest.approx((m + p - 1) * 3000.0)


@pytest.mark.parametrize("schedule_type", [ScheduleGPipe, Schedule1F1B])
def test_a_timing_only_pipeline_step_on_a_fake_world(pipeline_world, schedule_type):
    with torch.neuron.timing_only():
        stages, x, y = _stages_and_batch()
        steps = {m: pipeline_step(_schedule(pipeline_world, schedule_type, stages[0], m), stages, x, target=y)
                 for m in (4, 16)}
    step = steps[4]
    # Ranks alike: the middle stages take the same time; the last adds the loss.
    assert step.compute_ns[(1, "F")] == step.compute_ns[(2, "F")] < step.compute_ns[(3, "F")]
    assert step.compute_ns[(1, "B")] == step.compute_ns[(2, "B")]
    # A micro-batch's activation (16 x 256 fp32) crosses to the next trn1 instance over EFA.
    cores = per_core("trn1", 2)                   # 32 NeuronCore ranks to an instance
    hop = collective_cost("send_recv", BATCH // 4 * WIDTH * 4, 33, cores).time_ns
    assert hop == step.p2p_ns[(1, "F")] == step.p2p_ns[(0, "B")]
    assert hop > collective_cost("send_recv", BATCH // 4 * WIDTH * 4, 2, cores).time_ns
    summary = step.summary
    assert summary["topology"] == "trn1.32xlarge/core" and summary["ranks"] == STAGES
    assert summary["step_time"] == pytest.approx(step.timeline.step_ns * 1e-9)
    assert 0 < summary["p2p_exposed_time"] < summary["step_time"]
    lanes = {(e["stage"], e["kind"]) for e in step.to_records()}
    assert lanes == {(s, k) for s in range(STAGES) for k in "FB"}
    # More micro-batches: a smaller bubble, as the schedule's formula says.
    assert steps[16].summary["bubble_fraction"] < summary["bubble_fraction"]
    assert summary["bubble_fraction"] > (STAGES - 1) / (4 + STAGES - 1) * 0.9


def test_measuring_leaves_the_stages_gradients_as_they_were(pipeline_world):
    stages, x, y = _stages_and_batch()
    schedule = _schedule(pipeline_world, ScheduleGPipe, stages[0], 4)
    first = pipeline_step(schedule, stages, x, target=y)
    assert all(p.grad is None for s in stages for p in s.parameters())
    assert pipeline_step(schedule, stages, x, target=y).compute_ns == first.compute_ns


def test_interleaved_schedules_run_their_own_order(pipeline_world):
    stages = [PipelineStage(torch.nn.Linear(2, 2).to("neuron"), i, 2 * STAGES, torch.device("neuron"),
                            group=pipeline_world) for i in (0, STAGES)]
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=8, loss_fn=F.mse_loss)
    order = schedule_order(schedule)
    assert sorted({a.stage for a in order[0]}) == [0, STAGES]
    costs = {(s, k): 100.0 for s in range(2 * STAGES) for k in "FB"}
    interleaved = simulate_pipeline(order, costs)
    # Two chunks per rank shrink the bubble below one-stage-per-rank 1F1B's.
    assert interleaved.bubble_fraction < (STAGES - 1) / (8 + STAGES - 1)


def test_the_figure_has_a_lane_per_stage(pipeline_world):
    with torch.neuron.timing_only():
        stages, x, y = _stages_and_batch()
        step = pipeline_step(_schedule(pipeline_world, Schedule1F1B, stages[0], 4), stages, x, target=y)
    fig = step.figure()
    assert {name for trace in fig.data for name in trace.y} == {f"stage {s}" for s in range(STAGES)}
    assert "bubble" in fig.layout.title.text


def _one_rank_step(rank, schedule_type, **stage_meta):
    """One rank's ``schedule.step`` in a fake world, as the rank would run it in a job."""
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()).to("neuron")
    x, y = torch.randn(BATCH, WIDTH, device="neuron"), torch.randn(BATCH, WIDTH, device="neuron")
    stage = PipelineStage(module, rank, STAGES, torch.device("neuron"), **stage_meta)
    schedule = schedule_type(stage, n_microbatches=4, loss_fn=F.mse_loss)
    with wb.profile() as prof:
        schedule.step(*((x,) if rank == 0 else ()), **({"target": y} if rank == STAGES - 1 else {}))
    return prof


def _shapes(rank):
    """PipelineStage's metadata for one micro-batch: what lets a stage skip asking its peers."""
    activation = torch.empty(BATCH // 4, WIDTH, device="meta", requires_grad=True)
    return {"input_args": activation.detach() if rank == 0 else activation, "output_args": activation}


@pytest.mark.parametrize("rank", [0, 1, STAGES - 1])
@pytest.mark.parametrize("schedule_type", [ScheduleGPipe, Schedule1F1B])
def test_each_rank_of_a_fake_world_runs_its_schedule_step(neuron, rank, schedule_type):
    fake_world(STAGES, rank=rank, topology="trn1")
    try:
        with torch.neuron.timing_only():
            timed = _one_rank_step(rank, schedule_type, **_shapes(rank))
        with_values = _one_rank_step(rank, schedule_type, **_shapes(rank))
    finally:
        dist.destroy_process_group()
    sends = [op for op in timed.trace.ops if op.name == "collective::send_recv"]
    # Activations forward and their gradients back: one micro-batch's (16 x 256 fp32) each way.
    neighbours = 1 if rank in (0, STAGES - 1) else 2
    assert len(sends) == 2 * 4 * neighbours
    assert {op.input_shapes or op.output_shapes for op in sends} == {f"float32[{BATCH // 4}, {WIDTH}]"}
    hop_ns = collective_cost("send_recv", BATCH // 4 * WIDTH * 4, STAGES, per_core("trn1", 2)).time_ns
    assert [op.end_ns - op.start_ns for op in sends] == pytest.approx([hop_ns] * len(sends))
    # Timing-only and real values take the same simulated time.
    assert timed.summary["total_time"] == pytest.approx(with_values.summary["total_time"])


def test_a_stage_without_shapes_says_what_to_pass_in_a_fake_world(neuron):
    fake_world(STAGES, rank=1)
    try:
        with pytest.raises(RuntimeError, match="input_args"):
            _one_rank_step(1, Schedule1F1B)
    finally:
        dist.destroy_process_group()
