"""The TPU target from profile(): a model runs unchanged on ``neuron``, timed by the TPU cost
model; and the cost of a profiled step in dollars."""
from __future__ import annotations

import pytest
import torch

import workbench as wb
from backend.sim import pricing
from backend.sim.tpu import COMPILED_PATH_NOTE
from workbench.pricing import cost, cost_table


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


@pytest.fixture(autouse=True)
def _stock_prices():
    pricing.reset_prices()
    yield
    pricing.reset_prices()


def test_a_model_runs_unchanged_with_the_tpu_cost_model_behind_it():
    model, x = _model(), torch.randn(16, 32)
    with torch.no_grad():
        expected = model(x)
    model.to("neuron")
    with wb.profile(device="tpu", target="v5e") as prof:
        y = model(x.to("neuron"))
    torch.testing.assert_close(y.cpu(), expected)
    trace = prof.trace
    assert (trace.device_kind, trace.target) == ("tpu", "v5e")
    assert prof.meta["timing"] == COMPILED_PATH_NOTE
    assert trace.total_time_ns > 0 and prof.summary["mfu_estimated_percent"] > 0
    # XLA-style fusion: fewer timeline rows than ops recorded (the GELU joins the first linear)
    kernels = [op for op in trace.ops if op.kind == "kernel"]
    assert kernels and all(len(op.nodes) > 1 for op in kernels)


def test_profile_defaults_to_v6e():
    with wb.profile(device="tpu") as prof:
        torch.ones(8, device="neuron") + 1
    assert prof.trace.target == "v6e"


def test_cost_of_a_profiled_step():
    with wb.profile(device="tpu", target="v6e") as prof:
        a = torch.ones(256, 256, device="neuron")
        (a @ a).sum()
    step_s = prof.trace.total_time_ns * 1e-9
    est = cost(prof, tokens_per_step=1000)
    assert est.instance == "tpu-v6e" and est.usd_per_hour == 2.70
    assert est.usd_per_step == pytest.approx(2.70 * step_s / 3600)
    assert est.usd_per_million_items == pytest.approx(est.usd_per_step / 1000 * 1e6)
    half = cost(prof, tokens_per_step=1000, steps=2)
    assert half.usd_per_step == pytest.approx(est.usd_per_step / 2)
    pricing.set_price("tpu-v6e", 1.35)
    assert cost(prof, tokens_per_step=1000).usd_per_step == pytest.approx(est.usd_per_step / 2)
    with pytest.raises(ValueError, match="Invalid steps: 0"):
        cost(prof, steps=0)


def test_cost_table_compares_targets():
    profiles = {}
    for device, target in (("tpu", "v6e"), ("tpu", "v5e")):
        with wb.profile(device=device, target=target) as prof:
            a = torch.ones(512, 512, device="neuron")
            (a @ a).relu()
        profiles[target] = prof
    table = cost_table(profiles, tokens_per_step=512)
    assert list(table["label"]) == ["v6e", "v5e"] and list(table["instance"]) == ["tpu-v6e", "tpu-v5e"]
    assert {"usd_per_1m_tokens", "tokens_per_usd", "mfu_percent", "step_time_s"} <= set(table.columns)
    assert table["step_time_s"][0] < table["step_time_s"][1]      # v6e is the faster chip
