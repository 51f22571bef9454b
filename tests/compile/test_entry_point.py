"""torch finds the ``neuron`` backend by name, and ``import workbench`` does not import Dynamo.

The package declares the backend through the ``torch_dynamo_backends`` entry point; a checkout
whose installed metadata predates it gets the same entry from ``backend.compile.declare()``
(called by ``import workbench``). The fresh-interpreter checks run in a subprocess so that
nothing this test session already imported can hide an eager import.
"""
import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import backend.compile
from backend.compile.entry_point import BACKEND_NAME, ENTRY_POINT_GROUP, ENTRY_POINT_VALUE

ROOT = Path(__file__).resolve().parents[2]


def _run_fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_pyproject_declares_the_dynamo_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == {BACKEND_NAME: ENTRY_POINT_VALUE}
    entry = EntryPoint(name=BACKEND_NAME, value=ENTRY_POINT_VALUE, group=ENTRY_POINT_GROUP)
    assert entry.load() is backend.compile.neuron_backend


def test_import_workbench_leaves_dynamo_unimported_until_a_compile_asks():
    out = _run_fresh("""
        import sys
        import torch
        import workbench
        assert "torch._dynamo" not in sys.modules, "import workbench imported torch._dynamo"
        assert "backend.compile.backend" not in sys.modules

        def f(x):
            return torch.tanh(x) * 2

        x = torch.randn(4, 8)
        out = torch.compile(f, backend="neuron")(x.to("neuron"))
        torch.testing.assert_close(out.cpu(), f(x))
        import backend.compile
        assert backend.compile.is_registered()
        assert len(backend.compile.compiled_graphs()) == 1
        print("ok")
    """)
    assert out.strip() == "ok"


def test_declared_when_dynamo_was_imported_first():
    out = _run_fresh("""
        import torch._dynamo
        import workbench
        from torch._dynamo.backends.registry import lookup_backend
        import backend.compile
        assert lookup_backend("neuron") is backend.compile.neuron_backend
        print("ok")
    """)
    assert out.strip() == "ok"
