"""Unchanged torchrun scripts in an environment where the workbench is installed (2 ranks each,
only ``import torch``; the rule in docs/stack.md):

- the device-generic DDP tutorial script runs on ``neuron`` when ``$WORKBENCH_DEVICE=neuron``
  asks for it, on CPU/gloo otherwise, with equal losses and weights; its older explicit form
  (``init_process_group("neuron")``) needs no variable and trains the same;
- a CPU-only FSDP2 script written for gloo trains on CPU exactly as with autoload turned off.
"""
import pytest

from installed import installed_environment, torchrun

pytestmark = pytest.mark.slow      # each starts torchrun and two ranks

# DDP's C++ warning when it has no timer for the parameters' device (test_ddp_time_stats.py).
NO_TIME_STATS = "Time stats are currently only collected for CPU and CUDA devices"

# Known flaky (about 1 run in 15 here, more under load): rank 0 of the neuron run can hang at exit in
# ~ProcessGroupGloo, joining a gloo worker that waits on a collective its peer never joined, while
# DDP's reducer is freed after destroy_process_group(). Not yet root-caused; it still runs and reports.
@pytest.mark.xfail(strict=False, reason="intermittent hang/failure of a neuron rank at exit (see comment)")
def test_the_device_generic_ddp_script_follows_workbench_device(tmp_path):
    on_neuron = torchrun("ddp_tutorial_script.py", installed_environment(tmp_path, WORKBENCH_DEVICE="neuron"))
    on_cpu = torchrun("ddp_tutorial_script.py", installed_environment(tmp_path))
    assert (on_neuron["device"], on_neuron["backend"]) == ("neuron:0", "neuron")
    assert (on_cpu["device"], on_cpu["backend"]) == ("cpu", "gloo")
    assert on_neuron["losses"] == on_cpu["losses"] and on_neuron["weights"] == on_cpu["weights"]
    assert NO_TIME_STATS not in on_neuron["stderr"]
    assert len(set(on_cpu["losses"])) == len(on_cpu["losses"])     # it trained

    explicit = torchrun("ddp_tutorial_script.py", installed_environment(tmp_path), "--backend", "neuron")
    assert (explicit["device"], explicit["backend"]) == ("neuron:0", "neuron")
    assert explicit["losses"] == on_cpu["losses"] and explicit["weights"] == on_cpu["weights"]


def test_a_cpu_only_fsdp2_script_is_unaffected_by_the_installed_workbench(tmp_path):
    installed = torchrun("fsdp2_cpu_script.py", installed_environment(tmp_path))
    without = torchrun("fsdp2_cpu_script.py", installed_environment(tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert installed["device"] == "cpu"
    assert installed["losses"] == without["losses"]
