"""backend.sim and backend.lowering import no torch / IPython / widgets / plotly, and no module of theirs in a cycle."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_fresh_interpreter_imports_no_frontend_modules():
    code = (
        "import sys, backend.sim, backend.lowering, backend.sim.scheduler, backend.lowering.kernel\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'IPython', 'ipywidgets', 'plotly'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_packages_declare_all():
    import backend.lowering
    import backend.sim
    import backend.sim.costs
    for pkg in (backend.sim, backend.lowering, backend.sim.costs):
        assert pkg.__all__ and all(hasattr(pkg, name) for name in pkg.__all__)


def _module_imports(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports by name (``TYPE_CHECKING`` imports too)."""
    files = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
             for f in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        graph[name] = {m for m in imported if m in files and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its modules, the first repeated at the end), or []."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module], path[len(path):] = "open", [module]
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


@pytest.mark.parametrize("package", ["backend/lowering", "backend/sim"])
def test_modules_import_each_other_without_cycles(package):
    assert _cycle(_module_imports(ROOT / package)) == []


def test_cycle_finder_sees_a_type_checking_cycle():
    assert _cycle({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a", "b", "a"]
