"""A fake world's own ``schedule.step()``, as the PyTorch pipelining tutorial writes it, profiled:
the rank's stages are timed as they run and the whole pipeline's step is joined from them."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                         ScheduleInterleavedZeroBubble)

import workbench as wb
from backend.sim.collectives import collective_cost
from backend.sim.topology import per_core
from workbench.distributed import fake_world

STAGES, WIDTH, BATCH = 4, 256, 64


@pytest.fixture
def world(neuron):
    made = []

    def make(rank):
        fake_world(STAGES, rank=rank, topology="trn1")
        made.append(rank)
    yield make
    if made:
        dist.destroy_process_group()


def _layer():
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU())


def _stage(module, index, stages, microbatches):
    activation = torch.empty(BATCH // microbatches, WIDTH, device="meta", requires_grad=True)
    return PipelineStage(module.to("neuron"), index, stages, torch.device("neuron"),
                         input_args=activation.detach() if index == 0 else activation, output_args=activation)


def _profiled_step(schedule, rank, stages=STAGES):
    x, y = torch.randn(BATCH, WIDTH, device="neuron"), torch.randn(BATCH, WIDTH, device="neuron")
    with wb.profile() as prof:
        schedule.step(*((x,) if rank == 0 else ()), **({"target": y} if rank == stages - 1 else {}))
    return prof


@pytest.mark.parametrize("schedule_type", [ScheduleGPipe, Schedule1F1B])
@pytest.mark.parametrize("microbatches", [4, 8])
def test_a_middle_rank_step_has_the_formula_bubble(world, schedule_type, microbatches):
    world(1)
    with torch.neuron.timing_only():
        module = _layer()
        schedule = schedule_type(_stage(module, 1, STAGES, microbatches), n_microbatches=microbatches,
                                 loss_fn=F.mse_loss)
        prof = _profiled_step(schedule, 1)
        microbatch = torch.randn(BATCH // microbatches, WIDTH, device="neuron")
        with wb.profile() as alone:         # one micro-batch through the stage, on its own
            module(microbatch)
    step = prof.pipeline
    fwd, bwd = step.compute_ns[(1, "F")], step.compute_ns[(1, "B")]
    # The stage's forward as the rank's clock ran it: its kernels, plus host launch gaps at most
    # as long as a fresh run's.
    assert alone.ops["time_ns"].sum() <= fwd <= alone.summary["total_time_ns"]
    # Ranks alike: every stage takes the measured stage's costs, so the schedule leaves exactly
    # the textbook bubble, and the transfers come on top.
    assert {step.compute_ns[(s, k)] for s in range(STAGES) for k in "FB"} == {fwd, bwd}
    p, m = STAGES, microbatches
    summary = prof.summary
    assert summary["pipeline_schedule_bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    assert step.timeline.step_without_p2p_ns == pytest.approx((m + p - 1) * (fwd + bwd), rel=1e-9)
    hop = collective_cost("send_recv", BATCH // m * WIDTH * 4, 2, per_core("trn1", 2)).time_ns
    assert step.p2p_ns[(2, "F")] == step.p2p_ns[(1, "B")] == hop
    assert summary["pipeline_bubble_fraction"] > summary["pipeline_schedule_bubble_fraction"]
    assert summary["pipeline_p2p_exposed_time"] == pytest.approx(
        (step.timeline.step_ns - step.timeline.step_without_p2p_ns) * 1e-9)
    assert 0 < summary["pipeline_p2p_exposed_time"] < summary["pipeline_step_time"]
    assert summary["pipeline_stages_measured"] == [1] and summary["pipeline_steps"] == 1
    assert summary["pipeline_schedule"] == schedule_type.__name__


def test_the_profile_shows_one_lane_per_stage(world):
    world(1)
    with torch.neuron.timing_only():
        schedule = Schedule1F1B(_stage(_layer(), 1, STAGES, 4), n_microbatches=4, loss_fn=F.mse_loss)
        prof = _profiled_step(schedule, 1)
    lanes = prof.figures()["pipeline"]
    assert {name for trace in lanes.data for name in trace.y} == {f"stage {s}" for s in range(STAGES)}
    records = prof.pipeline.to_records()
    assert {(r["stage"], r["kind"]) for r in records} == {(s, k) for s in range(STAGES) for k in "FB"}
    assert len(records) == STAGES * 4 * 2


def test_the_last_rank_counts_the_loss_on_its_own_stage_only(world):
    last = STAGES - 1
    world(last)
    with torch.neuron.timing_only():
        schedule = ScheduleGPipe(_stage(_layer(), last, STAGES, 4), n_microbatches=4, loss_fn=F.mse_loss)
        prof = _profiled_step(schedule, last)
    compute = prof.pipeline.compute_ns
    assert compute[(last, "F")] > compute[(0, "F")] == compute[(1, "F")] == compute[(2, "F")]
    assert prof.pipeline.timeline.stand_ins == {0: last, 1: last, 2: last}


def test_interleaving_shrinks_the_bubble(world):
    """Four ranks, eight layers: 1F1B with two layers a stage against interleaved 1F1B with one
    layer a stage, two stages a rank, both as the rank in the middle runs them."""
    world(1)
    microbatches = 8
    with torch.neuron.timing_only():
        plain = Schedule1F1B(_stage(torch.nn.Sequential(_layer(), _layer()), 1, STAGES, microbatches),
                             n_microbatches=microbatches, loss_fn=F.mse_loss)
        one_f_one_b = _profiled_step(plain, 1).summary
        chunks = [_stage(_layer(), index, 2 * STAGES, microbatches) for index in (1, 1 + STAGES)]
        interleaved = _profiled_step(ScheduleInterleaved1F1B(chunks, n_microbatches=microbatches,
                                                             loss_fn=F.mse_loss), 1, 2 * STAGES)
    summary = interleaved.summary
    assert summary["pipeline_stages"] == 2 * STAGES and summary["pipeline_stages_measured"] == [1, 1 + STAGES]
    assert one_f_one_b["pipeline_schedule_bubble_fraction"] == pytest.approx(
        (STAGES - 1) / (microbatches + STAGES - 1), rel=1e-9)
    assert summary["pipeline_schedule_bubble_fraction"] < one_f_one_b["pipeline_schedule_bubble_fraction"]
    assert summary["pipeline_bubble_fraction"] < one_f_one_b["pipeline_bubble_fraction"]
    # The hop from the last rank back to the first spans the whole pipeline group.
    nbytes, cores = BATCH // microbatches * WIDTH * 4, per_core("trn1", 2)
    assert interleaved.pipeline.p2p_ns[(STAGES, "F")] == collective_cost("send_recv", nbytes, STAGES, cores).time_ns
    assert interleaved.pipeline.p2p_ns[(1, "F")] == collective_cost("send_recv", nbytes, 2, cores).time_ns


def test_a_zero_bubble_schedule_times_its_split_backward(world):
    world(1)
    with torch.neuron.timing_only():
        chunks = [_stage(_layer(), index, 2 * STAGES, 8) for index in (1, 1 + STAGES)]
        prof = _profiled_step(ScheduleInterleavedZeroBubble(chunks, n_microbatches=8, loss_fn=F.mse_loss), 1,
                              2 * STAGES)
        chunks = [_stage(_layer(), index, 2 * STAGES, 8) for index in (1, 1 + STAGES)]
        interleaved = _profiled_step(ScheduleInterleaved1F1B(chunks, n_microbatches=8, loss_fn=F.mse_loss), 1,
                                     2 * STAGES)
    compute = prof.pipeline.compute_ns
    assert {kind for _, kind in compute} == {"F", "I", "W"} and all(ns > 0 for ns in compute.values())
    assert {(r["stage"], r["kind"]) for r in prof.pipeline.to_records()} == set(compute)
    # Weight gradients fill what would be bubble under interleaved 1F1B.
    assert (prof.summary["pipeline_schedule_bubble_fraction"]
            < interleaved.summary["pipeline_schedule_bubble_fraction"])


def test_steps_without_a_profile_or_on_real_values_are_left_alone(world):
    world(1)
    schedule = Schedule1F1B(_stage(_layer(), 1, STAGES, 4), n_microbatches=4, loss_fn=F.mse_loss)
    schedule.step()                               # nothing records: nothing is joined, nothing fails
    prof = _profiled_step(schedule, 1)            # with values: the same step joined
    assert prof.summary["pipeline_steps"] == 1
    with wb.profile() as nothing:
        torch.ones(2, device="neuron") + 1
    assert nothing.pipeline is None and "pipeline_step_time" not in nothing.summary


def test_the_chrome_trace_has_a_thread_per_stage(world, tmp_path):
    import gzip
    import json

    world(1)
    with torch.neuron.timing_only():
        schedule = ScheduleGPipe(_stage(_layer(), 1, STAGES, 4), n_microbatches=4, loss_fn=F.mse_loss)
        prof = _profiled_step(schedule, 1)
    events = json.loads(gzip.open(prof.export_chrome_trace(tmp_path / "t.json.gz")).read())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e.get("pid") == 3 and e.get("name") == "thread_name"}
    assert threads == {f"stage {s}" for s in range(STAGES)}
    spans = [e for e in events if e.get("pid") == 3 and e["ph"] == "X"]
    assert len(spans) == STAGES * 4 * 2
    assert wb.Profile.load(tmp_path / "t.json.gz").summary["op_count"] == prof.summary["op_count"]
    report = prof.save_html(tmp_path / "report.html").read_text()
    assert "<h2>pipeline</h2>" in report
    assert f"{100 * prof.summary['pipeline_bubble_fraction']:.1f} %" in report and "pipeline bubble" in report
