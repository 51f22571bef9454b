"""``workbench profile script.py``: runs the script on the device and writes the reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend.sim.gpu import GpuSession
from workbench import cli, session

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
import torch
x = torch.ones(32, 32)            # default device: the profiled one
y = torch.relu(x @ x).sum()
print("device", x.device.type, "args", sys.argv[1:], "value", float(y.cpu()))
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "model_script.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture
def gpu_sink(monkeypatch):
    monkeypatch.setattr(session, "make_sink", lambda device, target=None: GpuSession("h100"))


def test_profile_command_runs_the_script_and_writes_reports(script, tmp_path, capsys, gpu_sink):
    out = tmp_path / "out"
    code = cli.main(["profile", str(script), "--device", "neuron", "--target", "trn2", "--no-progress",
                     "--html", str(out / "r.html"), "--trace", str(out / "t.json"), "--csv", str(out / "csv"),
                     "--", "--epochs", "1"])
    assert code == 0
    text = capsys.readouterr().out
    assert "device neuron args ['--epochs', '1'] value 32768.0" in text
    assert "simulated time" in text and "on neuron trn2" in text
    assert (out / "r.html").stat().st_size > 1_000_000           # plotly.js embedded
    data = json.loads((out / "t.json").read_text())
    assert data["workbench"]["meta"]["script"] == str(script)
    assert "aten::mm" in (out / "csv" / "ops.csv").read_text()
    assert torch.get_default_device().type == "cpu"              # restored afterwards


def test_missing_script_is_an_error(tmp_path, gpu_sink):
    with pytest.raises(FileNotFoundError):
        cli.main(["profile", str(tmp_path / "nope.py")])


def test_compile_modules_compiles_each_top_level_module_once():
    from torch._dynamo.testing import CompileCounter

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x):
            return self.inner(x) + 1

    block, x = Block(), torch.randn(2, 4)
    counter = CompileCounter()
    original = torch.nn.Module.__call__
    with cli.compile_modules(backend=counter):
        first, second = block(x), block(x)
    assert torch.nn.Module.__call__ is original
    assert counter.frame_count == 1 and counter.op_count == 3
    torch.testing.assert_close(second, block(x))


def _run(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def test_bad_arguments_exit_2_with_usage():
    result = _run("profile")
    assert result.returncode == 2 and "usage: workbench profile" in result.stderr
    result = _run("profile", "x.py", "--device", "xla")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.slow
def test_python_m_workbench_end_to_end(script, tmp_path):
    result = _run("profile", str(script), "--device", "neuron", "--trace", str(tmp_path / "t.json.gz"))
    assert result.returncode == 0, result.stderr
    assert "TensorE active" in result.stdout
    from workbench.export import load_trace
    assert "aten::mm" in set(load_trace(tmp_path / "t.json.gz").ops["name"])


def test_compile_modules_restores_module_call_when_the_block_raises():
    original = vars(torch.nn.Module)["__call__"]
    with pytest.raises(RuntimeError, match="boom"):
        with cli.compile_modules(backend="eager"):
            assert vars(torch.nn.Module)["__call__"] is not original
            raise RuntimeError("boom")
    assert vars(torch.nn.Module)["__call__"] is original
