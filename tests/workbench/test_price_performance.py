"""Price-performance everywhere a target is named: compare() with device:target (a TPU among
them), the cost columns' exact arithmetic, and the migration report with a TPU target or
baseline, led by tokens per dollar."""
from __future__ import annotations

import math
import types

import pytest
import torch
from torch import nn

import workbench as wb
from backend.sim import pricing
from backend.sim.tpu import COMPILED_PATH_NOTE
from workbench.figures import price_performance_figure
from workbench.migration.price import percent_band, price_line
from workbench.pricing import cost_columns


@pytest.fixture(autouse=True)
def _stock_prices():
    pricing.reset_prices()
    yield
    pricing.reset_prices()


# -- cost arithmetic (exact numbers) --------------------------------------------------------------
def test_cost_columns_per_step_per_million_and_per_dollar():
    # tpu-v6e: $2.70 per chip-hour, one chip per "instance"; 2 ms a step, 4096 tokens a step
    row = cost_columns(2e-3, "v6e", 4096)
    assert row["instance"] == "tpu-v6e" and row["items_unit"] == "tokens"
    assert row["usd_per_step"] == pytest.approx(1.5e-6, rel=1e-12)            # 2.70 * 0.002 / 3600
    assert row["usd_per_1m_items"] == pytest.approx(1.5e-6 / 4096 * 1e6, rel=1e-12)
    assert row["items_per_usd"] == pytest.approx(4096 / 1.5e-6, rel=1e-12)


def test_cost_columns_charge_one_device_of_a_multi_device_instance():
    # p5.48xlarge holds 8 H100s: a step on one GPU pays an eighth of the instance-hour rate
    row = cost_columns(3.6, "h100", None)
    assert row["items_unit"] == "steps" and row["instance"] == "p5.48xlarge"
    assert row["usd_per_step"] == pytest.approx(55.04 / 8 / 1000, rel=1e-12)
    assert row["usd_per_1m_items"] == pytest.approx(row["usd_per_step"] * 1e6, rel=1e-12)
    # trn2.48xlarge: 16 chips x NeuronCores per chip; the simulator's device is one NeuronCore
    trn2 = pricing.price("trn2")
    assert cost_columns(3600.0, "trn2")["usd_per_step"] == pytest.approx(45.0 / trn2.devices, rel=1e-12)


def test_cost_columns_without_a_price_are_nan_not_an_error():
    for target in (None, "no-such-chip"):
        row = cost_columns(1e-3, target, 10)
        assert math.isnan(row["usd_per_step"]) and math.isnan(row["items_per_usd"])


def test_percent_band_follows_the_target_time_band():
    # target 1 ms for 100 tokens at $3.6/h per device = 1e-6 USD a step -> 1e8 tokens/USD; the
    # baseline buys 5e7: +100 %. A band of 0.8 .. 1.25 ms gives +60 % .. +150 %.
    target = types.SimpleNamespace(step_time_s=1e-3, items_per_usd=1e8)
    baseline = types.SimpleNamespace(items_per_usd=5e7)
    band = types.SimpleNamespace(low_ns=0.8e6, high_ns=1.25e6)
    report = types.SimpleNamespace(target_profile=lambda mode="eager": types.SimpleNamespace(band=band),
                                   step=lambda role, mode="eager": {"target": target, "baseline": baseline}[role],
                                   target_device="neuron", baseline_device="cuda")
    low, high = percent_band(report)
    assert (low, high) == (pytest.approx(60.0), pytest.approx(150.0))


# -- compare ------------------------------------------------------------------------------------
def test_compare_with_a_tpu_target_gives_cpu_values_and_prices_every_simulated_row():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)), torch.randn(8, 32)
    with torch.no_grad():
        expected = model(x)

    @torch.no_grad()
    def step(device):
        return model.to(device)(x.to(device))

    comparison = wb.compare(step, devices=["cuda:h100", "neuron:trn2", "tpu:v6e"], tokens_per_step=8)
    model.to("cpu")
    frame = comparison.frame.set_index("label")
    assert list(frame.index) == ["cuda h100", "neuron trn2", "tpu v6e"]
    for label in frame.index:
        torch.testing.assert_close(comparison.results[label].cpu(), expected)
    prof = comparison.profiles["tpu v6e"]
    assert prof.trace.device_kind == "tpu" and prof.meta["timing"] == COMPILED_PATH_NOTE
    for label, row in frame.iterrows():
        exact = cost_columns(row["time_s"], row["target"], 8)
        assert row["usd_per_step"] == exact["usd_per_step"] and row["instance"] == exact["instance"]
    assert "compiled (XLA) path" in comparison._repr_html_()
    fig = comparison.cost_figure()
    assert [list(t.x) for t in fig.data] == [["cuda h100", "neuron trn2", "tpu v6e"]] * 3
    assert list(fig.data[2].y) == pytest.approx(list(frame["usd_per_1m_items"]))


def test_price_figure_leaves_out_unsimulated_rows():
    frame = wb.compare(lambda: torch.ones(4) + 1, devices=["cpu", "tpu"]).frame
    fig = price_performance_figure(frame)
    assert [list(t.x) for t in fig.data] == [["tpu v6e"]] * 3


# -- migration report ---------------------------------------------------------------------------
class TinyLM(nn.Module):
    def __init__(self, vocab=64, d=32):
        super().__init__()
        self.tok, self.mix, self.head = nn.Embedding(vocab, d), nn.Linear(d, d), nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(torch.relu(self.mix(self.tok(idx))))


@pytest.fixture(scope="module")
def tpu_report():
    torch.manual_seed(0)
    return wb.migration_report(TinyLM(), torch.randint(0, 64, (2, 8)), target="tpu:v6e", compile=False)


def test_migration_report_with_a_tpu_target(tpu_report):
    perf = tpu_report.performance.set_index("role")
    assert (tpu_report.target, tpu_report.target_device, tpu_report.baseline) == ("v6e", "tpu", "h100")
    assert list(perf["device"]) == ["tpu", "cuda"] and list(perf["label"]) == ["v6e eager", "h100 eager"]
    assert (tpu_report.items_per_step, tpu_report.items_unit) == (16, "tokens")
    assert tpu_report.profiles["v6e eager"].trace.device_kind == "tpu"
    assert tpu_report.profiles["v6e eager"].summary["total_time"] == perf.loc["target", "step_time_s"]
    assert perf.loc["target", "usd_per_step"] == pytest.approx(2.70 * perf.loc["target", "step_time_s"] / 3600,
                                                               rel=1e-12)
    # coverage still comes from the NeuronCore that ran the step
    assert set(tpu_report.coverage["status"]) <= {"lowered", "lowered (fused)", "view (no device work)",
                                                   "host fallback", "host<->device transfer"}
    assert tpu_report.memory.capacity_bytes == 32e9


def test_findings_lead_with_tokens_per_dollar(tpu_report):
    perf = tpu_report.performance.set_index("role")
    pct = (perf.loc["target", "items_per_usd"] / perf.loc["baseline", "items_per_usd"] - 1) * 100
    first = tpu_report.findings[0]
    word = "more" if pct >= 0 else "fewer"
    assert first.startswith(f"price: {abs(pct):.0f}% {word} tokens per dollar on v6e than on h100 (")
    assert "no error band" in first
    assert any(COMPILED_PATH_NOTE in line for line in tpu_report.findings)


def test_html_report_has_the_price_performance_figure(tpu_report, tmp_path):
    html = tpu_report.save_html(tmp_path / "r.html").read_text()
    assert "Time, MFU and cost per step" in html and "USD per 1M tokens" in html


def test_tpu_as_baseline_and_the_band_of_a_neuron_target():
    torch.manual_seed(0)
    report = wb.migration_report(TinyLM(), torch.randint(0, 64, (2, 8)), target="trn2", baseline="tpu:v6e",
                                 compile=False, band=True)
    assert (report.baseline, report.baseline_device) == ("v6e", "tpu")
    assert report.step("baseline").device == "tpu" and report.step("neuron").role == "target"
    low, high = percent_band(report)
    target, baseline = report.step("target"), report.step("baseline")
    assert low <= (target.items_per_usd / baseline.items_per_usd - 1) * 100 <= high
    assert report.findings[0] == price_line(report)
    assert f"band {low:+.0f}% .. {high:+.0f}% from trn2's timing error band" in report.findings[0]


def test_unknown_device_in_a_target_is_refused():
    with pytest.raises(ValueError, match="tpu:"):
        wb.migration_report(TinyLM(), torch.randint(0, 64, (2, 8)), target="xla:v6e")


def test_beside_a_tpu_the_headline_prices_compiled_steps_on_both_sides():
    # A TPU runs only compiled graphs: pricing the other side's eager step would price eager
    # against compiled execution, not one chip against the other.
    torch.manual_seed(0)
    report = wb.migration_report(TinyLM(), torch.randint(0, 64, (2, 8)), target="tpu:v6e")
    target, baseline = report.step("target", "compiled"), report.step("baseline", "compiled")
    assert target is not None and baseline is not None
    pct = (target.items_per_usd / baseline.items_per_usd - 1) * 100
    assert report.findings[0].startswith(f"price: {abs(pct):.0f}% {'more' if pct >= 0 else 'fewer'} tokens")
    assert "(compiled step, on-demand price per device)" in report.findings[0]


def test_a_tpu_target_carries_its_own_timing_band():
    torch.manual_seed(0)
    report = wb.migration_report(TinyLM(), torch.randint(0, 64, (2, 8)), target="tpu:v6e", band=True)
    low, high = percent_band(report)
    target, baseline = report.step("target"), report.step("baseline")
    assert low < (target.items_per_usd / baseline.items_per_usd - 1) * 100 < high
    assert f"band {low:+.0f}% .. {high:+.0f}% from v6e's timing error band" in report.findings[0]
