"""Custom GPU code in a model: what has no Trainium counterpart until someone writes an NKI kernel.

Three kinds, each a blocker row with its share of the baseline GPU step and what a port needs:

- ops of a custom ``torch.ops`` namespace (a C++/CUDA extension registers them with
  ``TORCH_LIBRARY``, Python code with ``torch.library``), found in the recorded op stream;
- C++/CUDA extension modules a module's ``forward`` imports or calls: compiled libraries outside
  the standard library and torch, or imports that fail here (the model then runs a fallback
  path the GPU would not);
- Triton kernels (``@triton.jit`` / ``@triton.autotune`` objects) a ``forward`` calls.

A ``forward``'s share of the step is the baseline time of the ops its source lines issued
(the NeuronCore trace carries source lines, op for op with the baseline's); ``nki::`` ops are
kernels already written in NKI, not blockers.
"""
from __future__ import annotations

import dis
import importlib.util
import inspect
import sys
import types

import pandas as pd

__all__ = ["custom_code_table", "CUSTOM_CODE_COLUMNS", "BUILTIN_NAMESPACES"]

CUSTOM_CODE_COLUMNS = ("kind", "name", "where", "calls", "gpu_step_percent", "nki_port")
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "_c10d_functional_autograd", "c10d",
                                "collective", "nki", "profiler", "rngprims", "higher_order", "_dtensor",
                                "quantized", "_quantized", "torchvision"})
_PORT = {
    "custom op": "an NKI kernel with the op's inputs and outputs (nki.jit called with tensors becomes "
                 "nki::<name>, with a fake implementation for torch.compile); replace the torch.ops call",
    "C++/CUDA extension": "the extension's CUDA kernels rewritten in NKI (rows on 128 partitions, loops of "
                          "nl.load / engine instructions / nl.store), called from forward in place of the extension",
    "Triton kernel": "the Triton program rewritten in NKI: a program's block becomes [128, F] tiles, "
                     "tl.load / tl.store become nl.load / nl.store, tl.dot nisa.nc_matmul (K, M <= 128, N <= 512)",
}


def _namespace(op: str) -> str:
    return op.split("::", 1)[0] if "::" in op else ""


def _gpu_percent_by_op(recording) -> dict:
    total = recording.baseline.total_time_ns or 1.0
    out: dict = {}
    for op in recording.baseline.ops:
        out[op.name] = out.get(op.name, 0.0) + 100.0 * op.time_ns / total
    return out


def _forward_percent(recording, fn) -> float | None:
    """Baseline share of the ops that ``fn``'s source lines issued (None when not attributable)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    neuron, gpu = recording.neuron.ops, recording.baseline.ops
    if len(neuron) != len(gpu) or not recording.baseline.total_time_ns:
        return None
    span = range(first, first + len(lines))
    ns = 0.0
    for op, twin in zip(neuron, gpu):
        file, _, line = (op.source or "").rpartition(":")
        if file == path and line.isdigit() and int(line) in span:
            ns += twin.time_ns
    return 100.0 * ns / recording.baseline.total_time_ns


def _compiled_library(module: types.ModuleType) -> bool:
    top = module.__name__.split(".")[0]
    path = getattr(module, "__file__", None) or ""
    return path.endswith((".so", ".pyd")) and top not in sys.stdlib_module_names and top not in (
        "torch", "numpy", "triton", "functorch")


def _imports(code) -> list[str]:
    names = [i.argval for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME"]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _imports(const)
    return names


def _referenced(fn) -> list[tuple[str, str]]:
    """(kind, name) of the extensions and Triton kernels ``fn`` uses."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = []
    for name in _imports(code):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ("torch", "numpy", "triton", "workbench"):
            continue
        module = sys.modules.get(name)
        if module is None:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                found.append(("C++/CUDA extension", f"{name} (not installed here; the model runs its fallback)"))
                continue
            if (spec.origin or "").endswith((".so", ".pyd")):
                found.append(("C++/CUDA extension", name))
            continue
        if _compiled_library(module):
            found.append(("C++/CUDA extension", name))
    for name in code.co_names:
        value = fn.__globals__.get(name)
        if value is None:
            continue
        kind = type(value).__module__ or ""
        if kind.startswith("triton"):
            target = getattr(value, "fn", value)
            found.append(("Triton kernel", getattr(target, "__name__", name)))
        elif isinstance(value, types.ModuleType) and _compiled_library(value):
            found.append(("C++/CUDA extension", value.__name__))
        elif callable(value) and not isinstance(value, type):
            owner = sys.modules.get(getattr(value, "__module__", "") or "")
            if owner is not None and _compiled_library(owner) and type(value).__name__ == "builtin_function_or_method":
                found.append(("C++/CUDA extension", f"{owner.__name__}.{name}"))
    return list(dict.fromkeys(found))


def custom_code_table(model, recording) -> pd.DataFrame:
    """The blockers of ``model`` in its recorded eager step (``run.StepRecording``)."""
    rows = []
    gpu = _gpu_percent_by_op(recording)
    calls: dict = {}
    for op in recording.neuron.ops:
        calls[op.name] = calls.get(op.name, 0) + 1
    for op, n in calls.items():
        ns = _namespace(op)
        if ns and ns not in BUILTIN_NAMESPACES:
            rows.append({"kind": "custom op", "name": op, "where": f"torch.ops.{ns}", "calls": n,
                         "gpu_step_percent": gpu.get(op, 0.0), "nki_port": _PORT["custom op"]})
    seen = set()
    for path, module in model.named_modules():
        forward = type(module).forward
        if forward in seen:
            continue
        seen.add(forward)
        refs = _referenced(forward)
        if not refs:
            continue
        share = _forward_percent(recording, forward)
        for kind, name in refs:
            rows.append({"kind": kind, "name": name, "where": f"{type(module).__name__}.forward ({path or 'model'})",
                         "calls": None, "gpu_step_percent": share, "nki_port": _PORT[kind]})
    return pd.DataFrame(rows, columns=list(CUSTOM_CODE_COLUMNS))
