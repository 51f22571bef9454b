"""What ``import torch`` registers once the workbench is installed (``backend.autoload``, the
``torch.backends`` entry point), each in a fresh interpreter that never imports the workbench:
the ``"neuron"`` process-group backend always, the ``neuron`` device only when
``$WORKBENCH_DEVICE=neuron`` asks for it (docs/stack.md)."""
import json
import subprocess
import sys

import pytest

from installed import installed_environment

REPORT = """
import json, os, sys, torch, torch.distributed as dist
accelerator = torch.accelerator.current_accelerator()
print(json.dumps({
    "accelerator": None if accelerator is None else accelerator.type,
    "device_layer_imported": "backend.device" in sys.modules,
    "workbench_imported": "workbench" in sys.modules,
    "neuron_backend": dist.Backend.default_device_backend_map.get("neuron"),
    "cpu_backend": dist.get_default_backend_for_device("cpu"),
    "hugging_face_device": os.environ.get("ACCELERATE_TORCH_DEVICE"),
}))
"""


def _run(tmp_path, code: str, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env=installed_environment(tmp_path, **env),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_torch_registers_the_process_group_backend_and_leaves_cpu_the_accelerator(tmp_path):
    assert _run(tmp_path, REPORT) == {
        "accelerator": None, "device_layer_imported": False, "workbench_imported": False,
        "neuron_backend": "neuron", "cpu_backend": "gloo", "hugging_face_device": None}


def test_workbench_device_neuron_makes_neuron_the_accelerator(tmp_path):
    code = REPORT + "x = torch.ones(2, device='neuron'); print(json.dumps(str((x + x).device)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=installed_environment(tmp_path, WORKBENCH_DEVICE="neuron"))
    assert out.returncode == 0, out.stderr
    report, device = map(json.loads, out.stdout.strip().splitlines()[-2:])
    assert report == {"accelerator": "neuron", "device_layer_imported": True, "workbench_imported": False,
                      "neuron_backend": "neuron", "cpu_backend": "gloo", "hugging_face_device": "neuron"}
    assert device == "neuron:0"


@pytest.mark.slow
def test_a_neuron_process_group_registers_the_device_it_names(tmp_path):
    code = """
import json, torch, torch.distributed as dist
before = torch.accelerator.current_accelerator()
dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(3, device="neuron")
dist.all_reduce(t)
print(json.dumps([before is None, str(torch.accelerator.current_accelerator()), t.tolist()]))
dist.destroy_process_group()
"""
    assert _run(tmp_path, code) == [True, "neuron", [1.0, 1.0, 1.0]]


@pytest.mark.slow
def test_another_value_of_workbench_device_registers_nothing_and_says_so(tmp_path):
    out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=300,
                         env=installed_environment(tmp_path, WORKBENCH_DEVICE="trainium"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["accelerator"] is None
    assert "WORKBENCH_DEVICE='trainium'" in out.stderr


@pytest.mark.slow
def test_workbench_device_cpu_is_silent(tmp_path):
    out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=300,
                         env=installed_environment(tmp_path, WORKBENCH_DEVICE="cpu"))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout)["accelerator"] is None
