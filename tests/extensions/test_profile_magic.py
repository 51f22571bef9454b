"""%%neuron_profile: one device, line form, --compile, --compare, -o/-q, errors and restoration."""
import re

import pytest
import torch
from IPython.core.error import UsageError

from ext_display import outputs
from workbench.comparison import Comparison
from workbench.devices import DeviceState, active_device
from workbench.profiles import Profile

CELL = "y = model(x)\nseen = (type(model).__name__, next(model.parameters()).device.type, x.device.type)\n"


def test_cell_runs_on_neuron_and_returns_the_profile(small):
    prof = small.run_cell_magic("neuron_profile", "-o -q", CELL)
    assert isinstance(prof, Profile)
    s = prof.summary
    assert (s["device_kind"], s["target"]) == ("neuron", "trn2")
    assert s["op_count"] >= 3 and s["total_time"] > 0
    assert small.user_ns["seen"] == ("Sequential", "neuron", "neuron")
    torch.testing.assert_close(small.user_ns["y"].cpu(), small.user_ns["model"](small.user_ns["x"]))


def test_band_adds_the_error_band_to_the_summary(small):
    prof = small.run_cell_magic("neuron_profile", "-o -q --band", CELL)
    s = prof.summary
    assert s["total_time_low"] <= s["total_time"] <= s["total_time_high"] and s["band_dominant"]
    assert "total_time_low" not in small.run_cell_magic("neuron_profile", "-o -q", CELL).summary


def test_state_and_objects_are_restored(small):
    model, x = small.user_ns["model"], small.user_ns["x"]
    small.run_cell_magic("neuron_profile", "-q --device cuda --target a100", CELL)
    assert active_device() == DeviceState() and not torch.cuda.is_available()
    assert small.user_ns["model"] is model and small.user_ns["x"] is x
    assert model[0].weight.device.type == "cpu" and x.device.type == "cpu"


def test_the_cell_keeps_names_it_rebinds(small):
    small.run_cell_magic("neuron_profile", "-q", "x = x * 2\n")
    assert small.user_ns["x"].device.type == "neuron"


@pytest.mark.parametrize("options,device,target", [
    ("", "neuron", "trn2"), ("--target trn1", "neuron", "trn1"), ("-t trn3", "neuron", "trn3"),
    ("--device cuda", "cuda", "h100"), ("-d cuda -t h200", "cuda", "h200")])
def test_device_and_target(small, options, device, target):
    prof = small.run_cell_magic("neuron_profile", f"-o -q {options}", CELL)
    assert (prof.summary["device_kind"], prof.summary["target"]) == (device, target)
    assert small.user_ns["seen"][1] == ("cuda" if device == "cuda" else "neuron")


def test_default_is_the_active_device_used_in_place(small):
    small.run_line_magic("neuron_device", "neuron --target trn1 --move model,x")
    model = small.user_ns["model"]
    small.user_ns["_m"] = model
    prof = small.run_cell_magic("neuron_profile", "-o -q", "y = model(x)\nsame = model is _m\n")
    assert prof.summary["target"] == "trn1" and small.user_ns["same"]
    assert active_device() == DeviceState("neuron", "trn1")


def test_redirected_cuda_profiles_the_neuron_core(small):
    small.run_line_magic("neuron_device", "cuda --redirect")
    prof = small.run_cell_magic("neuron_profile", "-o -q", "y = model.cuda()(x.cuda())\n")
    assert prof.summary["device_kind"] == "neuron" and prof.summary["op_count"] >= 3
    assert active_device() == DeviceState("cuda", "h100", True)


def test_line_form_keeps_the_statement_verbatim(small):
    prof = small.run_line_magic("neuron_profile", "-o -q y = model(x); d = {'k': 'a  b'}")
    assert isinstance(prof, Profile) and prof.summary["op_count"] >= 3
    assert small.user_ns["d"] == {"k": "a  b"}
    assert small.user_ns["y"].device.type == "neuron"


def test_display_without_widgets_is_the_profile_summary(small):
    result, shown = outputs(small.run_cell_magic, "neuron_profile", "", CELL)
    assert result is None
    (bundle,) = shown
    assert "Profile: neuron trn2" in bundle["text/html"]


def test_display_in_a_kernel_is_the_dashboard(small, monkeypatch):
    monkeypatch.setattr(small, "kernel", object(), raising=False)
    _, shown = outputs(small.run_cell_magic, "neuron_profile", "", CELL)
    assert any("application/vnd.jupyter.widget-view+json" in b for b in shown)


def test_quiet_displays_nothing(small):
    result, shown = outputs(small.run_cell_magic, "neuron_profile", "-q", CELL)
    assert result is None and shown == []


def test_compile_runs_the_cell_with_compiled_modules(small):
    prof = small.run_cell_magic("neuron_profile", "-o -q --compile", CELL)
    assert small.user_ns["seen"][0] == "OptimizedModule"
    assert type(small.user_ns["model"]) is torch.nn.Sequential
    torch.testing.assert_close(small.user_ns["y"].cpu(), small.user_ns["model"](small.user_ns["x"]))
    assert prof.graphs, "the compile layer registered no graph for the compiled module"


def test_compile_modules_chooses_which(small):
    small.user_ns["head"] = torch.nn.Linear(32, 4)
    small.run_cell_magic("neuron_profile", "-q --compile-modules head",
                         "y = head(model(x))\nkinds = type(model).__name__, type(head).__name__\n")
    assert small.user_ns["kinds"] == ("Sequential", "OptimizedModule")
    assert type(small.user_ns["head"]) is torch.nn.Linear


def test_compare_runs_each_device(small):
    model, x = small.user_ns["model"], small.user_ns["x"]
    comparison, shown = outputs(small.run_cell_magic, "neuron_profile", "-o --compare cpu,cuda,neuron", CELL)
    assert isinstance(comparison, Comparison)
    assert list(comparison.frame["label"]) == ["cpu", "cuda h100", "neuron trn2"]
    assert list(comparison.frame["time_kind"]) == ["measured host wall time", "simulated", "simulated"]
    assert comparison.profiles["neuron trn2"].summary["op_count"] >= 3
    assert any("text/html" in b and "neuron trn2" in b["text/html"] for b in shown)
    assert active_device() == DeviceState()
    assert small.user_ns["model"] is model and small.user_ns["x"] is x


def test_compare_targets_go_to_their_devices(small):
    comparison = small.run_cell_magic("neuron_profile", "-o -q --compare neuron,cuda -t trn1,trn3,a100", CELL)
    assert list(comparison.frame["label"]) == ["neuron trn1", "neuron trn3", "cuda a100"]


def test_compare_pins_targets_and_prices_the_tpu(small):
    model, x = small.user_ns["model"], small.user_ns["x"]
    comparison, shown = outputs(small.run_cell_magic, "neuron_profile",
                                "-o --tokens 8 --compare cpu,cuda:h100,neuron:trn2,tpu:v6e", CELL)
    frame = comparison.frame.set_index("label")
    assert list(frame.index) == ["cpu", "cuda h100", "neuron trn2", "tpu v6e"]
    assert list(frame["device"]) == ["cpu", "cuda", "neuron", "tpu"]
    assert set(frame["items_unit"]) == {"tokens"}
    assert frame.loc["tpu v6e", "instance"] == "tpu-v6e"
    tpu_s = frame.loc["tpu v6e", "time_s"]
    assert frame.loc["tpu v6e", "usd_per_step"] == pytest.approx(2.70 * tpu_s / 3600, rel=1e-12)
    assert frame.loc["tpu v6e", "usd_per_1m_items"] == pytest.approx(2.70 * tpu_s / 3600 / 8 * 1e6, rel=1e-12)
    assert frame["usd_per_step"].isna().tolist() == [True, False, False, False]
    assert comparison.profiles["tpu v6e"].meta["device_kind"] == "tpu"
    # the TPU run computed on neuron, values as on the CPU
    torch.testing.assert_close(small.user_ns["y"].cpu(), model(x))
    html = next(b["text/html"] for b in shown if "text/html" in b and "tpu v6e" in b["text/html"])
    assert "compiled (XLA) path" in html and "USD / 1M tokens" in html
    assert active_device() == DeviceState() and small.user_ns["model"] is model


def test_profile_on_the_active_tpu(small):
    small.run_line_magic("neuron_device", "tpu --target v5e --move model,x")
    prof = small.run_cell_magic("neuron_profile", "-o -q", CELL)
    assert (prof.summary["device_kind"], prof.summary["target"]) == ("tpu", "v5e")
    assert small.user_ns["seen"][1:] == ("neuron", "neuron")
    assert active_device() == DeviceState("tpu", "v5e")


@pytest.mark.parametrize("line,cell,message", [
    ("", None, "nothing to profile"),
    ("-q", "   \n", "nothing to profile"),
    ("y = model(x)", CELL, "the cell form takes options only"),
    ("--device cpu", CELL, "invalid choice: 'cpu'"),
    ("--target trn9", CELL, "unknown target 'trn9'"),
    ("--device cuda --target trn2", CELL, "unknown target 'trn2'"),
    ("--compare cpu,xla", CELL, "unknown device xla"),
    ("--compare cpu,tpu:h100", CELL, "unknown device tpu:h100"),
    ("--compare cpu,neuron --device neuron", CELL, "not both"),
    ("--compare neuron -t h100", CELL, "unknown target h100"),
    ("--compare cpu,neuron --band", CELL, "--band times one device"),
    ("--bogus", CELL, "unrecognized arguments: --bogus"),
    *((f"--compare cpu,neuron --tokens={bad}", CELL, f"expected a finite number > 0, got '{bad}'")
      for bad in ("nan", "inf", "-inf", "-5", "0")),
])
def test_bad_input_is_a_usage_error(small, line, cell, message):
    small.run_line_magic("neuron_device", "neuron --target trn1")
    with pytest.raises(UsageError, match=message) as info:
        if cell is None:
            small.run_line_magic("neuron_profile", line)
        else:
            small.run_cell_magic("neuron_profile", line, cell)
    assert "%neuron_profile [-d {neuron,cuda,tpu}]" in str(info.value)
    assert active_device() == DeviceState("neuron", "trn1")


@pytest.mark.parametrize("options", ["--device cuda", "--compare cpu,cuda,neuron", "--compile"])
def test_error_in_the_cell_is_a_traceback_and_restores_state(small, capsys, options):
    small.run_line_magic("neuron_device", "neuron --target trn1")
    model = small.user_ns["model"]
    result = small.run_cell(f"%%neuron_profile {options}\ny = model(x)\nraise KeyError('boom in cell')\n")
    assert isinstance(result.error_in_exec, KeyError)
    printed = capsys.readouterr()
    text = re.sub(r"\x1b\[[0-9;]*m", "", printed.out + printed.err)
    assert "Traceback" in text and "raise KeyError('boom in cell')" in text
    assert active_device() == DeviceState("neuron", "trn1") and not torch.cuda.is_available()
    assert small.user_ns["model"] is model


def test_syntax_error_changes_nothing(small):
    with pytest.raises(SyntaxError):
        small.run_cell_magic("neuron_profile", "--device cuda", "y = model(x\n")
    assert active_device() == DeviceState()


def test_compare_in_a_terminal_without_a_browser_names_its_figures(small, monkeypatch, capsys):
    # Terminal IPython's plotly renderer is "browser"; with no browser it printed plotly's
    # "could not locate runnable browser" traceback for each figure.
    import webbrowser

    import plotly.io as pio

    def no_browser(*args, **kwargs):
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(pio.renderers, "default", "browser")
    monkeypatch.setattr(webbrowser, "get", no_browser)
    result, shown = outputs(small.run_cell, f"%%neuron_profile --compare cpu,neuron\n{CELL}")
    assert result.error_in_exec is None and result.error_before_exec is None
    texts = [b["text/plain"] for b in shown if "text/plain" in b]
    assert any(t.startswith("[figure: Device comparison") for t in texts)
    assert all("application/vnd.plotly.v1+json" not in b for b in shown)
    printed = capsys.readouterr()
    assert "Traceback" not in printed.out + printed.err and "runnable browser" not in printed.out + printed.err
