"""%neuron_migrate: the report of a notebook's model, option parsing, display, errors and state."""
import pytest
import torch
from IPython.core.error import UsageError

import extensions.migrate_magics as migrate_magics
from ext_display import outputs
from workbench.devices import DeviceState, active_device
from workbench.migration import MigrationReport

USAGE = "%neuron_migrate [-t TARGET] [-b BASELINE]"
FAST = "-o -q --no-compile"


@pytest.fixture
def calls(small, monkeypatch):
    """Replace the workbench call by a recorder: what the magic passes, without running a report."""
    seen = []

    def record(namespace, model, inputs, **options):
        seen.append((namespace, model, inputs, options))
        return "report"

    monkeypatch.setattr(migrate_magics, "migration_report_for", record)
    return seen


def test_a_tiny_mlp_gets_a_full_report(small):
    model = small.user_ns["model"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = small.run_line_magic("neuron_migrate", "model x -o -q --batch-sizes 8,16,32")
    assert isinstance(report, MigrationReport)
    assert (report.model_name, report.target, report.baseline, report.training) == ("Sequential", "trn2", "h100", True)
    assert [line.split(":")[0] for line in report.findings[:4]] == ["price", "op coverage", "numerics", "compile"]
    assert any(line.startswith("memory: batch 8 needs") for line in report.findings)
    assert {"aten::addmm", "aten::gelu"} <= set(report.coverage["op"])
    assert "optimizer" in ",".join(report.coverage["phases"])            # a training step: Adam ran
    assert list(report.memory.batches["batch_size"]) == [8, 16, 32]
    assert set(report.performance["mode"]) == {"eager", "compiled"}
    assert {"0", "2"} <= set(report.numerics.layers["layer"])
    assert small.user_ns["model"] is model
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key])
    assert active_device() == DeviceState()


@pytest.mark.parametrize("line,expected", [
    ("model x", dict(target="trn2", baseline="h100", training=True, batch_sizes=None, drift_threshold=0.02,
                     compile=True, band=False)),
    ("model x -t trn1 -b a100", dict(target="trn1", baseline="a100")),
    ("model x --target trn3 --baseline h200", dict(target="trn3", baseline="h200")),
    ("model x -t tpu:v6e -b neuron:trn1", dict(target="tpu:v6e", baseline="neuron:trn1")),
    ("model x --inference", dict(training=False)),
    ("model x --batch-sizes 8,16,32", dict(batch_sizes=[8, 16, 32])),
    ("model x --threshold 0.005", dict(drift_threshold=0.005)),
    ("model x --no-compile", dict(compile=False)),
    ("model x --band", dict(band=True)),
    ("net inp", dict()),
])
def test_options_reach_the_report(calls, small, line, expected):
    small.user_ns["net"], small.user_ns["inp"] = small.user_ns["model"], (small.user_ns["x"],)
    assert small.run_line_magic("neuron_migrate", line + " -q") is None
    ((namespace, model, inputs, options),) = calls
    assert namespace is small.user_ns and (model, inputs) == tuple(line.split()[:2])
    assert set(options) == {"target", "baseline", "training", "batch_sizes", "drift_threshold", "compile", "band"}
    assert {k: options[k] for k in expected} == expected


def test_o_returns_the_report(calls, small):
    assert small.run_line_magic("neuron_migrate", "model x -o -q") == "report"


@pytest.mark.parametrize("in_kernel,quiet,shows", [
    (False, False, "Migration report: Sequential (inference, batch 8) on trn2 vs h100"),   # the HTML
    (False, False, "op coverage: all"),                                                     # the text
    (True, False, "application/vnd.jupyter.widget-view+json"),                              # the widget
    (True, True, None),                                                                     # -q: nothing
])
def test_display(small, monkeypatch, in_kernel, quiet, shows):
    if in_kernel:
        monkeypatch.setattr(small, "kernel", object(), raising=False)
    line = "model x --no-compile --inference" + (" -q" if quiet else "")
    result, shown = outputs(small.run_line_magic, "neuron_migrate", line)
    assert result is None and len(shown) == (0 if quiet else 1)
    assert quiet or any(shows in mime or shows in str(data) for mime, data in shown[0].items())


def test_the_active_device_and_placement_are_kept(small):
    small.run_line_magic("neuron_device", "neuron --target trn1 --move model,x")
    model = small.user_ns["model"]
    report = small.run_line_magic("neuron_migrate", f"model x {FAST} -t trn3")
    assert report.target == "trn3" and len(report.coverage)
    assert active_device() == DeviceState("neuron", "trn1") and torch.neuron.get_target().name == "trn1"
    assert small.user_ns["model"] is model and model[0].weight.device.type == "neuron"


@pytest.mark.parametrize("line,message", [
    ("", "the following arguments are required: model, inputs"),
    ("model", "the following arguments are required: inputs"),
    ("nope x", r"not defined in this notebook: nope \(nn.Modules defined: model\)"),
    ("model y", "not defined in this notebook: y"),
    ("x x", "'x' is a Tensor, not an nn.Module"),
    ("model model", "'model': example_inputs hold no tensor with a batch dimension"),
    ("model x -t trn9", "invalid choice: 'trn9'"),
    ("model x --baseline trn2", "invalid choice: 'trn2'"),
    ("model x --batch-sizes 8,x", "takes integers separated by commas"),
    ("model x --batch-sizes 0", "needs positive integers"),
    ("model x --threshold -1", "expected a finite number > 0, got '-1'"),
    ("model x --threshold nan", "expected a finite number > 0, got 'nan'"),
    ("model x --threshold inf", "expected a finite number > 0, got 'inf'"),
    ("model x --threshold 0", "expected a finite number > 0, got '0'"),
    ("model x --batch-sizes nan", "takes integers separated by commas"),
    ("model x --threshold abc", "expected a finite number > 0, got 'abc'"),
    ("model x --bogus", "unrecognized arguments: --bogus"),
])
def test_bad_input_is_a_usage_error(small, line, message):
    small.run_line_magic("neuron_device", "neuron --target trn1")
    with pytest.raises(UsageError, match=message) as info:
        small.run_line_magic("neuron_migrate", line)
    assert USAGE in str(info.value)
    assert active_device() == DeviceState("neuron", "trn1") and torch.neuron.get_target().name == "trn1"


def test_an_error_in_the_model_is_a_traceback_and_the_session_goes_on(small):
    small.run_line_magic("neuron_device", "neuron --target trn1")
    small.user_ns["bad"] = torch.randn(8, 16)                 # the model wants 32 features
    result = small.run_cell("%neuron_migrate model bad -q\n")
    assert isinstance(result.error_in_exec, RuntimeError) and "cannot be multiplied" in str(result.error_in_exec)
    assert active_device() == DeviceState("neuron", "trn1") and torch.neuron.get_target().name == "trn1"
    report = small.run_line_magic("neuron_migrate", f"model x {FAST} --inference")
    assert isinstance(report, MigrationReport) and not report.training
