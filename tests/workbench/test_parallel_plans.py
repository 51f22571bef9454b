"""TP x PP x DP plans: exact memory accounting, the pipeline's step, ``fit_chips`` and ``sweep``
over plan dimensions."""
import logging

import pytest
import torch
from torch import nn

import workbench as wb
from backend.sim.collectives import collective_cost
from backend.sim.presets import get_target
from backend.sim.topology import per_core
from workbench.fit import fit_chips, measure_model
from workbench.parallel_plans import ModelCosts, ParallelPlan, evaluate_plan

WIDTH, BATCH, LAYERS = 512, 16, 8
TOPOLOGY = per_core("trn1", 2)
COSTS = ModelCosts("trn1", parameters=1000, parameter_bytes=4000, activation_bytes=800, forward_ns=1000.0,
                   backward_ns=2000.0, boundary_bytes=64, blocks=8)


def _model():
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def test_memory_per_rank_splits_states_by_tp_pp_and_fsdp_and_holds_the_schedules_microbatches():
    plan = ParallelPlan(tp=2, pp=4, dp=2, fsdp=True, microbatches=8, schedule="1f1b")
    row = evaluate_plan(COSTS, plan, hbm_bytes=1650, topology=TOPOLOGY)
    # 16-way states: 250 B weights, 250 B gradients, 500 B AdamW; one block of the stage's two
    # gathered (4000 / 8 / 2); activations / 8, four micro-batches in flight under 1F1B.
    assert (row["weights_bytes"], row["gradients_bytes"], row["optimizer_bytes"]) == (250, 250, 500)
    assert (row["gathered_bytes"], row["activation_bytes"]) == (250, 400)
    assert row["hbm_bytes_per_rank"] == 1650 and row["fits"] and row["ranks"] == 16
    assert not evaluate_plan(COSTS, plan, hbm_bytes=1649, topology=TOPOLOGY)["fits"]
    gpipe = evaluate_plan(COSTS, ParallelPlan(tp=2, pp=4, dp=2, fsdp=True, microbatches=8, schedule="gpipe"),
                          1650, TOPOLOGY)
    assert gpipe["activation_bytes"] == 800                  # GPipe holds all eight
    ddp = evaluate_plan(COSTS, ParallelPlan(tp=2, pp=4, dp=2, microbatches=8), 1650, TOPOLOGY)
    assert (ddp["weights_bytes"], ddp["optimizer_bytes"], ddp["gathered_bytes"]) == (500, 1000, 0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_pipeline_step_leaves_the_schedules_bubble(schedule):
    p, m = 4, 8
    row = evaluate_plan(COSTS, ParallelPlan(pp=p, microbatches=m, schedule=schedule), 10**9, TOPOLOGY)
    stage_ns = (1000.0 + 2000.0) / p
    assert row["pipeline_time_ns"] - row["p2p_exposed_ns"] == pytest.approx((m + p - 1) * stage_ns, rel=1e-12)
    assert row["bubble_fraction"] > (p - 1) / (m + p - 1) and row["p2p_exposed_ns"] > 0
    assert row["step_time_ns"] == row["pipeline_time_ns"] and row["dp_communication_ns"] == 0.0


def test_tp_and_dp_communication_are_priced_on_their_groups():
    row = evaluate_plan(COSTS, ParallelPlan(tp=2, pp=2, dp=4, microbatches=2), 10**9, TOPOLOGY)
    blocks_per_stage = COSTS.blocks // 2
    all_reduce = collective_cost("all_reduce", COSTS.boundary_bytes, 2, TOPOLOGY).time_ns
    assert row["tp_communication_ns"] == pytest.approx(2 * 2 * blocks_per_stage * all_reduce * 2)
    peers = TOPOLOGY.derive("peers", devices_per_node=TOPOLOGY.devices_per_node // 4)
    assert row["dp_communication_ns"] == collective_cost("all_reduce", 1000, 4, peers).time_ns
    assert row["step_time_ns"] == row["pipeline_time_ns"] + row["dp_communication_ns"]


def test_plans_are_checked():
    with pytest.raises(ValueError, match="Invalid tp"):
        ParallelPlan(tp=0)
    with pytest.raises(ValueError, match="unknown pipeline schedule 'zb'; known: gpipe, 1f1b"):
        ParallelPlan(schedule="zb")
    with pytest.raises(ValueError, match="fsdp"):
        ParallelPlan(fsdp="yes")


def test_a_model_is_measured_once_on_one_core(neuron):
    allocated = torch.neuron.memory_allocated()
    costs = measure_model(_model, torch.randn(BATCH, WIDTH), get_target("trn1"))
    assert torch.neuron.memory_allocated() == allocated          # nothing it measured stays on the device
    assert costs.parameters == LAYERS * (WIDTH * WIDTH + WIDTH) and costs.parameter_bytes == 4 * costs.parameters
    assert costs.blocks == LAYERS and costs.boundary_bytes == BATCH * WIDTH * 4
    # Each layer after the first saves its input for backward (the first one's is the batch).
    assert costs.activation_bytes == (LAYERS - 1) * BATCH * WIDTH * 4
    assert 0 < costs.forward_ns < costs.backward_ns


def test_fit_chips_finds_the_smallest_tp_pp_dp_job_and_its_step(caplog):
    caplog.set_level(logging.ERROR)
    fit = fit_chips(_model, torch.randn(BATCH, WIDTH), target="trn1", plan="ddp", hbm_bytes=12 * 2**20,
                    tp=[1, 2], pp=[1, 2, 4], microbatches=4, max_chips=4)
    tried = fit.tried
    # 33.6 MB of state on one core does not fit 12 MiB; nor does any plan of 2 ranks (16.9 MB):
    # four ranks split it four ways, and the fastest of the 4-rank plans that fit wins.
    assert not tried[tried["ranks"] < 4]["fits"].any()
    fours = tried[(tried["ranks"] == 4) & tried["fits"]]
    assert fit.ranks == 4 and fit.chips == 2 and fit.step_time_ns == fours["step_time_ns"].min()
    assert fit.layout["tp"] * fit.layout["pp"] * fit.layout["dp"] == 4 and fit.layout["microbatches"] == 4
    assert f"pp={fit.layout['pp']}" in repr(fit)
    assert set(tried["pp"]) == {1, 2, 4} and (tried["hbm_bytes_per_rank"] <= 12 * 2**20).eq(tried["fits"]).all()


def test_sweep_takes_plan_dimensions():
    model = _model()
    frame = wb.sweep(model, {"target": ["trn1"], "pp": [1, 4], "microbatches": [8], "parallelism": ["fsdp"],
                             "dp": [2]}, inputs=lambda b: torch.randn(b, WIDTH), parallel=False, progress=False)
    assert list(frame["ranks"]) == [2, 8] and list(frame["chips"]) == [1, 4]
    one, four = frame.iloc[0], frame.iloc[1]
    assert one["bubble_fraction"] == 0.0 and 0 < four["bubble_fraction"] < 1
    assert four["p2p_exposed_time_s"] > 0 and four["hbm_peak_bytes_per_rank"] < one["hbm_peak_bytes_per_rank"]
    costs = measure_model(lambda: _model(), torch.randn(1, WIDTH), get_target("trn1"))
    expected = evaluate_plan(costs, ParallelPlan(pp=4, dp=2, fsdp=True, microbatches=8), get_target("trn1").hbm_bytes,
                             TOPOLOGY)
    assert four["step_time_s"] == pytest.approx(expected["step_time_ns"] * 1e-9)


@pytest.mark.parametrize("grid, message", [
    ({"tp": [0]}, "Invalid tp in the sweep grid"),
    ({"chips": [2], "pp": [2]}, "chips follow from tp x pp x dp"),
    ({"pp": [2], "parallelism": ["none"]}, "parallelism in \\('ddp', 'fsdp'\\)"),
    ({"pp": [2], "schedule": ["zb"]}, "unknown pipeline schedule"),
    ({"pp": [2], "target": ["h100"]}, "NeuronCore targets"),
    ({"tpp": [2]}, "unknown grid key"),
])
def test_plan_grids_are_checked_before_anything_runs(grid, message):
    with pytest.raises(ValueError, match=message):
        wb.sweep(_model(), grid, inputs=lambda b: torch.randn(b, WIDTH), parallel=False, progress=False)
