"""Imports point down: extensions -> workbench -> backend/{device,compile} -> lowering -> sim.

Checked on the source (every import statement, lazy ones inside functions included), so a
violation fails here even if no test happens to execute that line. device and compile are peers:
compile reads the device's op stream, and CUDA emulation hands torch.compile to the compile
backend through a lazy import.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> packages (by prefix) it must never import
FORBIDDEN = {
    "backend/sim": ("backend.lowering", "backend.device", "backend.compile", "workbench", "extensions",
                    "torch", "IPython", "ipywidgets", "plotly"),
    "backend/lowering": ("backend.device", "backend.compile", "workbench", "extensions", "torch",
                         "IPython", "ipywidgets", "plotly"),
    "backend/device": ("workbench", "extensions", "IPython", "ipywidgets", "plotly"),
    "backend/compile": ("workbench", "extensions", "IPython", "ipywidgets", "plotly"),
    "workbench": ("extensions",),
}
# The one sanctioned upward import: `%load_ext workbench` must find the magics, so the package's
# IPython hooks (load/unload_ipython_extension) forward to extensions, lazily.
ALLOWED = {("workbench/__init__.py", "extensions")}


def imported_modules(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package):
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if (str(path.relative_to(ROOT)), module) in ALLOWED:
                continue
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[package]):
                violations.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not violations, "\n".join(violations)
