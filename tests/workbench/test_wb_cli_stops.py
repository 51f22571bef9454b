"""``workbench profile``: a script that exits or is interrupted still gets its profile written."""
from __future__ import annotations

import pytest

import workbench  # noqa: F401  (registers the neuron device)
from backend.sim.gpu import GpuSession
from workbench import cli, session
from workbench.export import load_trace

BODY = """
import sys
import torch
x = torch.ones(16, 16)
y = torch.relu(x @ x)
{stop}
z = y * 3                      # never runs
"""


@pytest.fixture(autouse=True)
def gpu_sink(monkeypatch):
    monkeypatch.setattr(session, "make_sink", lambda device, target=None: GpuSession("h100"))


def _run(tmp_path, stop: str):
    script = tmp_path / "stops.py"
    script.write_text(BODY.format(stop=stop))
    trace = tmp_path / "t.json"
    return (lambda: cli.main(["profile", str(script), "--no-progress", "--trace", str(trace)])), trace


@pytest.mark.parametrize("stop,status", [("sys.exit(3)", 3), ("sys.exit(0)", 0), ("sys.exit()", 0),
                                         ("raise SystemExit('bad input')", 1)])
def test_script_exit_writes_the_profile_and_keeps_the_status(tmp_path, stop, status):
    run, trace = _run(tmp_path, stop)
    assert run() == status
    names = list(load_trace(trace).ops["name"])
    assert "aten::relu" in names and "aten::mul" not in names


def test_interrupted_script_writes_the_profile_then_reraises(tmp_path):
    run, trace = _run(tmp_path, "raise KeyboardInterrupt")
    with pytest.raises(KeyboardInterrupt):
        run()
    loaded = load_trace(trace)
    assert "aten::relu" in list(loaded.ops["name"]) and loaded.meta["error"] == "KeyboardInterrupt"


def test_compile_modules_patches_module_call_through_a_patcher_and_restores_it():
    import torch

    original = torch.nn.Module.__call__
    with pytest.raises(KeyboardInterrupt):
        with cli.compile_modules():
            assert torch.nn.Module.__call__ is not original
            raise KeyboardInterrupt
    assert torch.nn.Module.__call__ is original and "__call__" in vars(torch.nn.Module)
