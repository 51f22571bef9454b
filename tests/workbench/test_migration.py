"""``wb.migration_report``: small models with known properties, one per question it answers."""
from __future__ import annotations

import gc
import inspect

import pandas as pd
import pytest
import torch
from torch import nn

import workbench as wb
from backend.lowering.registry import lowering_for
from backend.sim.presets import MiB, derive
from workbench import cli
from workbench.migration.run import Step, replica, to_device

UNLOWERED_OP = "aten::linalg_cholesky_ex"


class CholeskyHead(nn.Module):
    """A linear layer, then a Cholesky factorisation: dense linear algebra a NeuronCore has no
    lowering for (it runs on the host), like solvers in second-order optimisers."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 64)

    def forward(self, x):
        h = self.proj(x)
        gram = h.transpose(-1, -2) @ h + torch.eye(h.shape[-1], device=h.device)
        return torch.linalg.cholesky(gram)


class Cancel(nn.Module):
    """x @ W - x @ W' with W' within 1e-3 of W: bf16 rounding of W and W' erases the difference."""

    def __init__(self, d: int = 64):
        super().__init__()
        w = torch.randn(d, d)
        self.w = nn.Parameter(w)
        self.w2 = nn.Parameter(w + 1e-3 * torch.randn(d, d))

    def forward(self, x):
        return x @ self.w - x @ self.w2


class Branchy(nn.Module):
    """A data-dependent Python branch: Dynamo has to break the graph at the ``.item()``."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        if h.sum().item() > 0:  # graph break here
            h = h * 2
        return self.b(torch.relu(h))


class ArgMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        return self.proj(x).argmax(-1)


def _mlp():
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))


@pytest.fixture(scope="module")
def fallback_report():
    torch.manual_seed(0)
    model = CholeskyHead()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = wb.migration_report(model, torch.randn(8, 32), compile=False)
    return report, model, before


def test_unlowered_op_is_counted_and_costed_as_a_fallback(fallback_report):
    assert lowering_for(UNLOWERED_OP) is None, f"{UNLOWERED_OP} is lowered now: pick an op the registry lacks"
    report, _, _ = fallback_report
    row = report.coverage.set_index("op").loc[UNLOWERED_OP]
    assert row["status"] == "host fallback" and row["calls"] == 1 and row["phases"] == "forward"
    # the host round trip costs more than the host compute alone: the transfers are in it
    assert row["fallback_time_ns"] == row["time_ns"] > row["host_busy_ns"] > 0
    assert UNLOWERED_OP in list(report.fallbacks["op"])
    lowered = report.coverage[report.coverage["status"] == "lowered"]
    assert {"aten::addmm", "aten::mm"} <= set(lowered["op"])
    assert {"forward", "backward", "optimizer"} <= set(",".join(report.coverage["phases"]).split(","))
    neuron = report.performance.set_index("label").loc[f"{report.target} eager"]
    assert neuron["fallback_count"] >= 1 and neuron["fallback_time_s"] * 1e9 >= row["time_ns"]
    fb = report.time_breakdown.set_index("where").loc["host fallbacks"]
    assert fb["time_ns"] == pytest.approx(report.fallbacks["time_ns"].sum())
    assert any(UNLOWERED_OP in line for line in report.findings)


def test_the_users_model_is_left_untouched(fallback_report):
    _, model, before = fallback_report
    assert model.training and all(p.device.type == "cpu" for p in model.parameters())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


def test_performance_costs_the_same_step_on_target_and_baseline(fallback_report):
    report, _, _ = fallback_report
    perf = report.performance.set_index("device")
    assert list(report.performance["label"]) == ["trn2 eager", "h100 eager"]
    assert perf.loc["neuron", "op_count"] == perf.loc["cuda", "op_count"]
    assert (perf["step_time_s"] > 0).all() and (perf["mfu_percent"] > 0).all()
    assert perf.loc["cuda", "relative_to_baseline_eager"] == pytest.approx(1.0)
    assert report.profiles["trn2 eager"].summary["total_time"] == pytest.approx(perf.loc["neuron", "step_time_s"])


@pytest.fixture(scope="module")
def drift_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), Cancel(), nn.Linear(64, 8))


def test_cancellation_drifts_in_bf16_and_is_flagged_where_it_starts(drift_model):
    x = 100 * torch.randn(16, 64)
    report = wb.migration_report(drift_model, x, training=False, compile=False)
    num = report.numerics
    layers = num.layers.set_index("layer")
    assert not layers.loc["0", "flagged"] and layers.loc["0", "rel_error_mean"] < 0.01   # plain bf16 rounding
    assert layers.loc["1", "flagged"] and layers.loc["1", "rel_error_mean"] > 0.1
    assert num.drift_origins == ["1"]
    assert "fp32" in layers.loc["1", "suggestion"] and "inherited" in layers.loc["2", "suggestion"]
    assert "1" in num.worst_layers[:2] and num.max_rel_error > 0.1 and num.output_rel_error > 0.1
    assert any("starting at 1" in line for line in report.findings)


def test_a_bf16_model_is_compared_against_fp32(drift_model):
    model = drift_model.to(torch.bfloat16)
    report = wb.migration_report(model, (100 * torch.randn(16, 64)).bfloat16(), training=False, compile=False)
    assert report.dtype == "bfloat16" and "bfloat16" in report.numerics.compared
    assert report.numerics.drift_origins == ["1"]
    assert "bfloat16" in report.numerics.layers.set_index("layer").loc["1", "suggestion"]


def test_graph_break_is_reported_with_reason_and_line():
    lines, first = inspect.getsourcelines(Branchy.forward)
    line = first + next(i for i, text in enumerate(lines) if "graph break here" in text)
    report = wb.migration_report(Branchy(), torch.randn(4, 16), compile=False)
    breaks = report.compile.breaks
    assert len(breaks) == 1, breaks
    row = breaks.iloc[0]
    assert "item()" in row["reason"] and "capture_scalar_outputs" in row["hint"]
    assert row["source"] == f"{__file__}:{line}" and "h.sum().item()" in row["code"]
    assert report.compile.graph_count == 2 and not report.compile.ready
    assert report.compile.compiled_error == "not requested (compile=False)"


def test_compiled_step_or_the_reason_there_is_none():
    report = wb.migration_report(_mlp(), torch.randn(8, 256), training=False)
    comp = report.compile
    if comp.compiled is None:
        assert comp.compiled_error and "compiled" not in set(report.performance["mode"])
        assert any("no compiled step" in line for line in report.findings)
    else:
        assert comp.compiled_error is None
        assert any(op.kind == "kernel" for op in comp.compiled.neuron.ops)
        assert set(report.performance["mode"]) == {"eager", "compiled"}
    assert any("mode='default'" in note for note in comp.notes)


@pytest.fixture(scope="module")
def tight_report():
    torch.manual_seed(0)
    model = _mlp()
    tiny = derive("trn2", hbm_bytes=12 * MiB)
    return wb.migration_report(model, torch.randn(64, 16, 256), target=tiny, compile=False), model, tiny


def test_batch_that_does_not_fit_is_flagged_with_the_batch_that_does(tight_report):
    report, model, tiny = tight_report
    mem = report.memory
    params = sum(p.numel() * 4 for p in model.parameters())
    assert mem.parameters_bytes == params and mem.gradients_bytes == params
    assert mem.optimizer_state_bytes == 2 * params                     # Adam: two fp32 moments
    assert mem.activations_bytes >= 64 * 16 * 1024 * 4                  # at least the hidden layer
    assert mem.optimizer_temporaries_bytes > 0 and mem.backward_activations_bytes > 0
    assert mem.capacity_bytes == tiny.hbm_bytes and not mem.fits and mem.peak_bytes > tiny.hbm_bytes
    assert 1 <= mem.max_batch_size < 64
    assert mem.estimate(mem.max_batch_size) <= tiny.hbm_bytes < mem.estimate(mem.max_batch_size + 1)
    table = mem.batches.set_index("batch_size")
    assert table.loc[mem.max_batch_size, "peak_phase"] in ("forward", "backward")   # activations bound it
    assert not table.loc[64, "fits"] and table.loc[64, "measured"] and table.loc[mem.max_batch_size, "fits"]
    assert "estimate" in mem.note and any("does NOT fit" in line for line in report.findings)
    assert torch.neuron.get_target().hbm_bytes != tiny.hbm_bytes      # the device's target is restored


def test_the_batch_that_fits_runs_a_step_within_that_hbm(tight_report):
    report, model, tiny = tight_report
    batch = report.memory.max_batch_size
    previous = torch.neuron.get_target()
    gc.collect()
    # the estimate is an upper bound: a real step at that batch stays within the HBM
    torch.neuron.set_target(derive(tiny, hbm_bytes=tiny.hbm_bytes + torch.neuron.memory_allocated()))
    try:
        net = replica(model, "neuron")
        (x,) = to_device((torch.randn(batch, 16, 256),), "neuron")
        Step(net).run((x,), {})
        del net, x
    finally:
        gc.collect()
        torch.neuron.set_target(previous)


def test_frames_html_and_widget(tight_report, tmp_path):
    report, _, _ = tight_report
    frames = report.to_frames()
    assert set(frames) == {"coverage", "numerics", "graph_breaks", "recompiles", "performance", "time_breakdown",
                           "memory", "batch_sizes"}
    assert all(isinstance(f, pd.DataFrame) for f in frames.values())
    page = report.save_html(tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script src=" not in page     # offline: plotly inline
    assert page.count("Plotly.newPlot") == len(report.figures()) == 6     # price-performance included
    snippet = report._repr_html_()
    assert "does NOT fit" in snippet and "Plotly" not in snippet
    assert "MigrationReport(Sequential" in repr(report)
    ipywidgets = pytest.importorskip("ipywidgets")
    from workbench.migration.view import widget
    view = widget(report)
    assert isinstance(view, ipywidgets.VBox) and len(view.children[1].children) == 6


def test_cli_migrate_writes_the_report(tmp_path, capsys):
    script = tmp_path / "net.py"
    script.write_text("import torch\nnet = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n"
                      "batch = torch.randn(4, 8)\nif __name__ == '__main__':\n    raise SystemExit('must not run')\n")
    html, csv = tmp_path / "r.html", tmp_path / "csv"
    code = cli.main(["migrate", str(script), "--model-var", "net", "--inputs-var", "batch", "--inference",
                     "--no-compile", "--batch-sizes", "4,64", "--html", str(html), "--csv", str(csv)])
    out = capsys.readouterr().out
    assert code == 0 and "op coverage:" in out and "memory: batch 4" in out
    assert html.is_file() and sorted(p.stem for p in csv.iterdir()) == sorted(
        ["coverage", "numerics", "graph_breaks", "recompiles", "performance", "time_breakdown", "memory",
         "batch_sizes"])
    assert list(pd.read_csv(csv / "batch_sizes.csv")["batch_size"]) == [4, 64]
    with pytest.raises(ValueError, match="no model named 'model'; nn.Modules defined: net"):
        cli.main(["migrate", str(script), "--no-compile"])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown target"):
        wb.migration_report(_mlp(), torch.randn(2, 256), target="trn9")
    with pytest.raises(ValueError, match="batch dimension"):
        wb.migration_report(_mlp(), (3,))
    with pytest.raises(ValueError, match="requires grad"):
        wb.migration_report(nn.Flatten(), torch.randn(2, 3), compile=False)
    with pytest.raises(ValueError, match="loss_fn"):       # an integer output has nothing to train on
        wb.migration_report(ArgMax(), torch.randn(2, 3), compile=False)


def test_a_model_already_on_neuron_under_the_neuron_default_device():
    with wb.use_device("neuron"):
        model = CholeskyHead()                       # built on neuron, like a notebook after %neuron_device
        report = wb.migration_report(model, torch.randn(8, 32), compile=False)
        assert torch.get_default_device().type == "neuron"
    assert next(model.parameters()).device.type == "neuron" and model.training
    assert UNLOWERED_OP in list(report.fallbacks["op"]) and report.numerics.output_rel_error < 0.02
