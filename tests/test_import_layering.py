"""Imports point down, without exceptions: the layering rule of DESIGN.md, checked on the source.

    backend.sim < backend.lowering < backend.nki < backend.recording < {backend.device, backend.compile}
                < backend.distributed < backend.autoload < workbench < extensions

A module may import its own layer and the layers below it, never one above, and never a peer
of its rank: device and compile meet only in ``backend.recording`` (the op stream), below both.
Third-party limits on top: ``backend.sim`` and ``backend.lowering`` import no torch; nothing
below ``workbench`` imports IPython, ipywidgets or plotly.

Every import statement counts, lazy ones inside functions included, relative ones resolved, and
``from a import b`` counts as importing ``a.b`` too (it may be a submodule); so a violation fails
here even if no test happens to execute that line. The single documented exception:
``workbench``'s IPython hooks (``load/unload_ipython_extension``) forward to ``extensions``,
so that ``%load_ext workbench`` finds the magics.

Inside each package, modules form no import cycles either (the compile layer once had
costing <-> registry; the device layer tensor <-> dispatch).
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ranks, lowest first; packages sharing a rank are peers and must not import each other.
LAYERS = [
    ("backend.sim",),
    ("backend.lowering",),
    ("backend.nki",),
    ("backend.recording",),
    ("backend.device", "backend.compile"),
    ("backend.distributed",),
    ("backend.autoload",),      # torch's autoload entry point: registers from each layer
    ("workbench",),
    ("extensions",),
]
_GUI = ("IPython", "ipywidgets", "anywidget", "plotly")
THIRD_PARTY_FORBIDDEN = {
    "backend.sim": ("torch",) + _GUI,
    "backend.lowering": ("torch",) + _GUI,
    "backend.nki": ("torch",) + _GUI,
    "backend.recording": _GUI,
    "backend.device": _GUI,
    "backend.compile": _GUI,
    "backend.distributed": _GUI,
}
# The one sanctioned upward import (see the module docstring).
ALLOWED = {("workbench/__init__.py", "extensions")}

_RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
# Packages whose modules must not import each other in a cycle: all of them. (In backend.device
# the dispatcher builds DeviceTensors and installs itself as their __torch_dispatch__ on import,
# so tensor.py does not import it back.)
ACYCLIC_PACKAGES = tuple(sorted(_RANK))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files():
    for top in ("backend", "workbench", "extensions"):
        yield from sorted((ROOT / top).rglob("*.py"))


def imported_modules(path: Path):
    """(line, absolute dotted name) for every import in the file, lazy and relative ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if node.module or node.level == 0:
                yield node.lineno, base
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{base}.{alias.name}"
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            yield node.lineno, node.args[0].value


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _layer_of(module: str) -> str | None:
    return next((p for p in _RANK if _within(module, p)), None)


def _violation(importer: str, imported: str) -> str | None:
    layer = _layer_of(importer)
    for bad in THIRD_PARTY_FORBIDDEN.get(layer, ()):
        if _within(imported, bad):
            return f"{layer} must not import {bad}"
    target = _layer_of(imported)
    if layer is None or target is None or target == layer:
        return None
    if _RANK[target] > _RANK[layer]:
        return f"{layer} must not import {target}, a layer above it"
    if _RANK[target] == _RANK[layer]:
        return f"{layer} must not import its peer {target}"
    return None


@pytest.mark.parametrize("package", sorted(_RANK))
def test_imports_point_down(package):
    violations = {}   # (file, line, why) -> first offending name on that line
    for path in _source_files():
        if not _within(_module_name(path), package):
            continue
        where = str(path.relative_to(ROOT))
        for line, module in imported_modules(path):
            if (where, module.split(".")[0]) in ALLOWED:
                continue
            why = _violation(_module_name(path), module)
            if why:
                violations.setdefault((where, line, why), module)
    assert not violations, "\n".join(f"{where}:{line} imports {module}: {why}"
                                      for (where, line, why), module in violations.items())


def test_every_backend_package_has_a_layer():
    """A new package under backend/ must be placed in LAYERS before it can be checked."""
    packages = {f"backend.{p.stem}" for p in (ROOT / "backend").iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert packages <= set(_RANK), sorted(packages - set(_RANK))


def _import_graph() -> dict:
    modules = {_module_name(p): p for p in _source_files()}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for _, imported in imported_modules(path):
            # the longest known module the name falls in ("a.b.func" -> module "a.b")
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                edges.add(".".join(parts))
        graph[name] = edges
    return graph


def find_cycles(graph: dict, package: str) -> list[list[str]]:
    """Strongly connected components (Tarjan) of more than one module inside ``package``."""
    nodes = [n for n in graph if _within(n, package)]
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if not _within(succ, package):
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    return cycles


def test_cycle_detector_finds_a_cycle():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert find_cycles(graph, "p") == [["p.a", "p.b", "p.c"]]


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_import_cycles_inside_package(package):
    cycles = find_cycles(_import_graph(), package)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
