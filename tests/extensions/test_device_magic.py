"""%neuron_device: show, switch, move; bad input is a UsageError that changes nothing."""
import pytest
import torch
from IPython.core.error import UsageError

from ext_display import outputs
from workbench.devices import DeviceState, active_device


def test_no_argument_shows_active_device_and_what_is_available(shell):
    result, shown = outputs(shell.run_line_magic, "neuron_device", "")
    assert result is None
    (bundle,) = shown
    assert "cpu (host eager, no simulation)" in bundle["text/plain"]
    assert "neuron: trn1, trn2, trn3" in bundle["text/plain"]
    assert "cuda: a100, h100, h200" in bundle["text/html"]
    assert "tpu: v5e, v5p, v6e" in bundle["text/plain"]


def test_tpu_says_it_times_the_compiled_path(shell):
    _, shown = outputs(shell.run_line_magic, "neuron_device", "tpu --target v6e")
    assert "TPU v6e" in shown[0]["text/plain"] and "compiled (XLA) path" in shown[0]["text/plain"]


@pytest.mark.parametrize("line,state,where", [
    ("neuron", DeviceState("neuron", "trn2"), "neuron:0"),
    ("neuron --target trn1", DeviceState("neuron", "trn1"), "neuron:0"),
    ("neuron -t trn3", DeviceState("neuron", "trn3"), "neuron:0"),
    ("cuda", DeviceState("cuda", "h100"), "cuda:0"),
    ("cuda --target a100", DeviceState("cuda", "a100"), "cuda:0"),
    ("cuda --target h200 --redirect", DeviceState("cuda", "h200", True), "neuron:0"),
    ("tpu", DeviceState("tpu", "v6e"), "neuron:0"),
    ("tpu --target v5p", DeviceState("tpu", "v5p"), "neuron:0"),
])
def test_switch(shell, line, state, where):
    _, shown = outputs(shell.run_line_magic, "neuron_device", line)
    assert active_device() == state
    assert state.status_line() in shown[0]["text/plain"]
    shell.run_cell("import torch\nt = torch.ones(2)")
    assert str(shell.user_ns["t"].device) == where


def test_cpu_puts_torch_back_exactly(shell):
    before = (torch.get_default_device(), torch.cuda.is_available, torch.Tensor.cuda, torch.cuda.is_available(),
              torch.cuda.device_count())
    for line in ("neuron --target trn1", "cuda --target h100", "cuda --redirect", "cpu"):
        shell.run_line_magic("neuron_device", line)
    after = (torch.get_default_device(), torch.cuda.is_available, torch.Tensor.cuda, torch.cuda.is_available(),
             torch.cuda.device_count())
    assert after == before
    assert active_device() == DeviceState()


def test_move_named_objects(small):
    model, x = small.user_ns["model"], small.user_ns["x"]
    _, shown = outputs(small.run_line_magic, "neuron_device", "neuron --move model,x")
    assert "moved: model, x" in shown[0]["text/plain"]
    assert small.user_ns["model"] is model and model[0].weight.device.type == "neuron"
    assert small.user_ns["x"].device.type == "neuron" and x.device.type == "cpu"
    small.run_line_magic("neuron_device", "cpu -m x")
    assert small.user_ns["x"].device.type == "cpu"


def test_move_alone_moves_to_the_active_device(small):
    small.run_line_magic("neuron_device", "neuron")
    small.run_line_magic("neuron_device", "--move x")
    assert small.user_ns["x"].device.type == "neuron"
    assert small.user_ns["model"][0].weight.device.type == "cpu"


@pytest.mark.parametrize("line,message", [
    ("xla", "invalid choice: 'xla'"),
    ("neuron --target trn9", "unknown target 'trn9'"),
    ("cuda --target trn2", "unknown target 'trn2'"),
    # was AttributeError: 'GpuConfig' object has no attribute 'generation'
    ("neuron --target h100", r"known neuron targets: trn1, trn2, trn3 \('h100' is a gpu target: select it on "
                             r"the 'cuda' device"),
    ("neuron --target v6e", r"'v6e' is a tpu target: select it on the 'tpu' device"),
    ("tpu --target h100", "h100"),
    ("neuron --redirect", "redirect applies to cuda only"),
    ("cpu --target trn1", "the cpu device takes no target"),
    ("--target trn1", "--target, --redirect and --timing-only need a device"),
    ("--timing-only", "--target, --redirect and --timing-only need a device"),
    ("cpu --timing-only", "timing-only applies to the simulated devices"),
    ("neuron --move nope", "not a module or tensor of this notebook: nope"),
    ("neuron --move model,n", "not a module or tensor of this notebook: n"),
    ("neuron --move ,", "expected a comma-separated list"),
    ("neuron extra", "unrecognized arguments: extra"),
    ("neuron --target 'trn1", "cannot split the line"),
])
def test_bad_input_is_a_usage_error_that_changes_nothing(small, line, message):
    small.user_ns["n"] = 3
    small.run_line_magic("neuron_device", "cuda --target a100")
    before, x = active_device(), small.user_ns["x"]
    with pytest.raises(UsageError, match=message) as info:
        small.run_line_magic("neuron_device", line)
    assert "%neuron_device [-t TARGET] [--redirect] [--timing-only] [-m NAMES]" in str(info.value)
    assert active_device() == before and small.user_ns["x"] is x
    assert torch.cuda.is_available()


def test_usage_error_shows_one_line_not_a_traceback(shell, capsys):
    result = shell.run_cell("%neuron_device xla")
    assert isinstance(result.error_in_exec, UsageError)
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "UsageError" in text and "Traceback" not in text
