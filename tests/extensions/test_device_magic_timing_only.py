"""%neuron_device --timing-only: new tensors hold shapes, not values, until the device switches again."""
import pytest
import torch
from IPython.core.error import UsageError

from backend.device.timing_only import STATE, TimingOnlyError
from ext_display import outputs
from workbench.devices import DeviceState, active_device


@pytest.fixture(autouse=True)
def _values_mode():
    STATE.reset()
    yield
    STATE.reset()


@pytest.mark.parametrize("line,state,where", [
    ("neuron --timing-only", DeviceState("neuron", "trn2", timing_only=True), "neuron:0"),
    ("cuda --target a100 --timing-only", DeviceState("cuda", "a100", timing_only=True), "cuda:0"),
    ("cuda --redirect --timing-only", DeviceState("cuda", "h100", True, True), "neuron:0"),
])
def test_timing_only_switch(shell, line, state, where):
    _, shown = outputs(shell.run_line_magic, "neuron_device", line)
    assert active_device() == state and torch.neuron.is_timing_only()
    assert "timing-only: shapes, no values" in shown[0]["text/plain"]
    # Above the 65,536 elements a new tensor may have and keep values in the mode.
    shell.run_cell("import torch\nt = torch.nn.Linear(512, 256)(torch.ones(2, 512))")
    t = shell.user_ns["t"]
    assert str(t.device) == where and t._inner.is_meta and t.shape == (2, 256)
    with pytest.raises(TimingOnlyError, match="timing-only mode"):
        t.sum().item()


def test_switching_again_leaves_the_mode(shell):
    shell.run_line_magic("neuron_device", "neuron --timing-only")
    shell.run_line_magic("neuron_device", "neuron")
    assert not torch.neuron.is_timing_only() and active_device() == DeviceState("neuron", "trn2")
    shell.run_cell("import torch\nt = torch.ones(2)")
    assert not shell.user_ns["t"]._inner.is_meta
    shell.run_line_magic("neuron_device", "cuda --timing-only")
    shell.run_line_magic("neuron_device", "cpu")
    assert not torch.neuron.is_timing_only() and active_device() == DeviceState()


def test_status_shows_a_mode_switched_by_torch(shell):
    shell.run_line_magic("neuron_device", "neuron")
    with torch.neuron.timing_only():
        _, shown = outputs(shell.run_line_magic, "neuron_device", "")
    assert "neuron:0 (simulated trn2 NeuronCore, timing-only: shapes, no values)" in shown[0]["text/plain"]


@pytest.mark.parametrize("line", ["cpu --timing-only", "--timing-only", "neuron --timing-only --target trn9"])
def test_bad_combination_changes_nothing(shell, line):
    shell.run_line_magic("neuron_device", "neuron --timing-only")
    before = active_device()
    with pytest.raises(UsageError):
        shell.run_line_magic("neuron_device", line)
    assert active_device() == before and torch.neuron.is_timing_only()


def test_failed_move_restores_the_mode(small):
    small.run_line_magic("neuron_device", "neuron")

    class Unmovable(torch.nn.Module):
        def _apply(self, fn, recurse=True):
            raise RuntimeError("cannot move")

    small.user_ns["bad"] = Unmovable()
    with pytest.raises(RuntimeError, match="cannot move"):
        small.run_line_magic("neuron_device", "cuda --timing-only --move bad")
    assert active_device() == DeviceState("neuron", "trn2") and not torch.neuron.is_timing_only()


# -- %neuron_profile follows the mode, or switches it for one run -----------------------------------
@pytest.fixture
def shell(shell):
    shell.user_ns["torch"] = torch
    return shell


def test_profile_magic_timing_only_for_one_run(shell):
    prof = shell.run_line_magic("neuron_profile", "-o -q --timing-only y = torch.ones(300, 300) @ torch.ones(300, 300)")
    assert shell.user_ns["y"]._inner.is_meta and prof.meta["timing_only"]
    assert prof.summary["values"].startswith("none") and "timing-only" in repr(prof)
    assert not torch.neuron.is_timing_only() and active_device() == DeviceState()


def test_profile_magic_keeps_the_active_mode_when_it_switches_target(shell):
    shell.run_line_magic("neuron_device", "neuron --timing-only")
    prof = shell.run_line_magic("neuron_profile", "-o -q -t trn1 y = torch.ones(300, 300) @ torch.ones(300, 300)")
    assert shell.user_ns["y"]._inner.is_meta and prof.meta["timing_only"] and prof.meta["target"] == "trn1"
    assert active_device() == DeviceState("neuron", "trn2", timing_only=True)


def test_profile_magic_restores_the_mode_when_the_cell_needs_values(shell):
    shell.run_line_magic("neuron_device", "neuron")
    with pytest.raises(TimingOnlyError, match="timing-only mode"):
        shell.run_line_magic("neuron_profile", "-q --timing-only float(torch.ones(300, 300).sum())")
    assert active_device() == DeviceState("neuron", "trn2") and not torch.neuron.is_timing_only()


def test_profile_magic_timing_only_refuses_a_cpu_comparison(shell):
    with pytest.raises(UsageError, match="--timing-only needs simulated devices"):
        shell.run_line_magic("neuron_profile", "--timing-only --compare cpu,neuron y = 1")
    assert not torch.neuron.is_timing_only()
