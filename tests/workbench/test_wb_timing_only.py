"""Timing-only mode switched where the device is chosen: set_device / use_device, the CLI,
compare() and migration_report(); each leaves the mode as it found it, also on an error."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from backend.device.neuron_module import set_target
from backend.device.timing_only import STATE, TimingOnlyError
from workbench import cli
from workbench.devices import DeviceState, active_device, set_device, use_device

# Above the 65,536 elements a new tensor may have and keep its values in timing-only mode.
BIG = (300, 300)

SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
loss = model(torch.ones(16, 256)).pow(2).mean()
loss.backward()
print("data-free", loss._inner.is_meta)
"""


@pytest.fixture(autouse=True)
def from_cpu_with_values():
    set_device("cpu")
    set_target("trn2")
    STATE.reset()
    yield
    set_device("cpu")
    set_target("trn2")
    STATE.reset()


def _state():
    return active_device(), torch.neuron.is_timing_only(), torch.get_default_device()


# -- set_device / use_device ---------------------------------------------------------------------
@pytest.mark.parametrize("device,where", [("neuron", "neuron"), ("cuda", "cuda")])
def test_set_device_timing_only(device, where):
    state = wb.set_device(device, timing_only=True)
    assert state.timing_only and active_device() == state and torch.neuron.is_timing_only()
    assert "timing-only" in state.status_line()
    y = nn.Linear(512, 256)(torch.ones(4, 512))
    assert y.device.type == where and y._inner.is_meta
    with pytest.raises(TimingOnlyError):
        y.sum().item()
    wb.set_device(device)                  # switching again without the flag leaves the mode
    assert not torch.neuron.is_timing_only() and not torch.ones(2)._inner.is_meta


def test_cpu_takes_no_timing_only_and_changes_nothing():
    wb.set_device("neuron", "trn1")
    before = _state()
    with pytest.raises(ValueError, match="timing-only applies to the simulated devices"):
        wb.set_device("cpu", timing_only=True)
    assert _state() == before


@pytest.mark.parametrize("already", [False, True])
def test_use_device_restores_the_mode_after_an_exception(already):
    wb.set_device("neuron", "trn1")
    torch.neuron.set_timing_only(already)        # also a mode switched by torch, not by set_device
    before = _state()
    with pytest.raises(KeyError), wb.use_device("cuda", "a100", timing_only=not already):
        assert torch.neuron.is_timing_only() is not already
        assert torch.ones(BIG)._inner.is_meta is not already
        raise KeyError("boom")
    assert _state() == before
    assert active_device() == DeviceState("neuron", "trn1", timing_only=already)


# -- CLI ------------------------------------------------------------------------------------------
def _profile_cli(tmp_path, capsys, *flags):
    script = tmp_path / "mlp.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "t.json"
    assert cli.main(["profile", str(script), "--no-progress", "--trace", str(trace), *flags]) == 0
    return capsys.readouterr().out


def test_cli_timing_only_times_like_values_and_says_so(tmp_path, capsys):
    with_values = _profile_cli(tmp_path, capsys)
    timing_only = _profile_cli(tmp_path, capsys, "--timing-only")
    assert "data-free False" in with_values and "data-free True" in timing_only
    assert "on neuron trn2 (timing-only)" in timing_only
    assert "tensor values" in timing_only and "tensor values" not in with_values

    def simulated(text):
        return next(line for line in text.splitlines() if "simulated time" in line)

    assert simulated(timing_only) == simulated(with_values)
    assert _state() == (DeviceState(), False, torch.device("cpu"))


def test_cli_script_needing_values_fails_naming_the_mode_and_restores(tmp_path):
    script = tmp_path / "reads.py"
    script.write_text("import torch\nprint(torch.ones(300, 300).sum().item())\n")
    with pytest.raises(TimingOnlyError, match="timing-only mode"):
        cli.main(["profile", str(script), "--no-progress", "--timing-only"])
    assert _state() == (DeviceState(), False, torch.device("cpu"))


# -- compare / migration_report ---------------------------------------------------------------------
def test_compare_timing_only_refuses_the_cpu_row():
    with pytest.raises(ValueError, match="simulated devices only"):
        wb.compare(lambda: torch.ones(2) + 1, timing_only=True)
    assert not torch.neuron.is_timing_only()


def test_compare_restores_the_mode_after_an_exception():
    def fails():
        torch.ones(BIG).sum().item()

    with pytest.raises(TimingOnlyError):
        wb.compare(fails, devices=("neuron",), timing_only=True)
    assert _state() == (DeviceState(), False, torch.device("cpu"))


def test_migration_report_timing_only_answers_like_values_but_numerics():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))
    x = torch.randn(8, 64)
    with_values = wb.migration_report(net, x, batch_sizes=[8, 64], compile=False)
    timing_only = wb.migration_report(net, x, batch_sizes=[8, 64], compile=False, timing_only=True)
    assert not torch.neuron.is_timing_only()
    assert timing_only.performance.equals(with_values.performance)
    assert timing_only.memory.measured == with_values.memory.measured
    assert timing_only.memory.batches.equals(with_values.memory.batches)
    assert "numerics: not compared: timing-only mode computes no values" in timing_only.findings
    assert timing_only.numerics.layers.empty and "timing-only" in timing_only._repr_html_()
    assert all(prof.meta["timing_only"] for prof in timing_only.profiles.values())
    assert all(p.device.type == "cpu" and not p.is_meta for p in net.parameters())   # the model untouched


def test_profile_says_timing_only_when_the_mode_was_already_on():
    wb.set_device("neuron", timing_only=True)
    with wb.profile() as prof:
        torch.ones(8, 8) + 1
    assert prof.meta["timing_only"] and "tensor values" in prof._repr_html_()
    wb.set_device("neuron")
    with wb.profile() as with_values:
        torch.ones(8, 8) + 1
    assert not with_values.meta["timing_only"] and "values" not in with_values.summary


def test_a_profile_without_a_target_uses_the_what_if_core_the_model_lives_on():
    # A model built on a roomy what-if core must not be profiled on the smaller default preset.
    from backend.sim.presets import derive

    roomy = derive("trn2", name="trn2-roomy", hbm_bytes=64 * 2**30)
    set_device("neuron", roomy, timing_only=True)
    model = nn.Linear(64, 64)
    prof = wb.profile(lambda: model(torch.ones(4, 64)))
    assert prof.meta["target"] == "trn2-roomy"


@pytest.mark.slow
def test_hugging_face_llama_3_8b_from_config_is_born_data_free_and_runs():
    # 8B parameters: 16 GB in bf16, more than this host's free memory in fp32. Timing-only makes
    # from_config's parameters data-free on the device; the forward is simulated like with values.
    transformers = pytest.importorskip("transformers")
    import psutil
    from backend.sim.presets import derive

    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
    set_device("neuron", derive("trn2", name="trn2-96GiB", hbm_bytes=96 * 2**30), timing_only=True)
    rss_before = psutil.Process().memory_info().rss
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) > 8e9
    assert all(p.device.type == "neuron" for p in model.parameters())
    # Only the RMSNorm weights (4,096 elements) are small enough to keep values.
    assert all(p._inner.is_meta == (p.numel() > 65536) for p in model.parameters())
    assert torch.neuron.memory_allocated() >= 16e9            # the simulated HBM holds the weights
    with torch.no_grad():
        prof = wb.profile(lambda: model(torch.randint(0, 128256, (1, 16))))
    assert prof.meta["target"] == "trn2-96GiB" and prof.summary["total_time"] > 0
    assert psutil.Process().memory_info().rss - rss_before < 1.5 * 2**30
    set_device("cpu")
    # On one trn2 core (12 GiB) the same model does not fit: the device's own OOM error.
    set_device("neuron", "trn2", timing_only=True)
    with pytest.raises(torch.OutOfMemoryError, match="12.00 GiB"):
        transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
