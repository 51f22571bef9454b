"""What a magic does to the notebook's namespace around one profiled cell, and undoes after.

Two scopes, both restoring exactly what they changed (and nothing the cell rebound itself):

- ``placed(ns, names, device)``: the named modules and tensors are seen as copies on ``device``
  for the block; the originals are bound again afterwards.
- ``compiled(ns, names)``: the named modules are seen as ``torch.compile(module,
  backend="neuron")`` for the block. Dynamo caches compiled code per module, so re-running a
  cell reuses what it compiled.

Pure Python over a dict: no IPython here, so tests drive it without a shell.
"""
from __future__ import annotations

import ast
import contextlib
import copy

import torch

from workbench.session import ensure_compile_backend

__all__ = ["names_used", "tensors_and_modules", "names_on", "placed", "compiled", "COMPILE_BACKEND"]

COMPILE_BACKEND = "neuron"


def names_used(source: str) -> set[str]:
    """Names the code reads or writes (``ast.Name`` nodes); empty when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def tensors_and_modules(namespace: dict, names) -> list[str]:
    """Those of ``names`` that ``namespace`` binds to a tensor or an ``nn.Module``, sorted."""
    return sorted(n for n in set(names) if isinstance(namespace.get(n), (torch.Tensor, torch.nn.Module)))


def names_on(namespace: dict, names, device_type: str) -> list[str]:
    """Those of ``names`` bound to a tensor, or a module whose first parameter (or buffer) is,
    on a device of type ``device_type`` ("cpu", "neuron", "cuda")."""
    out = []
    for name in tensors_and_modules(namespace, names):
        value = namespace[name]
        if isinstance(value, torch.nn.Module):
            value = next(iter(value.parameters()), next(iter(value.buffers()), None))
        if value is not None and value.device.type == device_type:
            out.append(name)
    return out


def _copy_to(value, device: torch.device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return copy.deepcopy(value).to(device)


@contextlib.contextmanager
def _rebound(namespace: dict, originals: dict, make):
    """Bind each name of ``originals`` to ``make(value)`` for the block; afterwards bind the
    original again, unless the block rebound the name itself."""
    new = {name: make(value) for name, value in originals.items()}
    namespace.update(new)
    try:
        yield sorted(new)
    finally:
        for name, value in new.items():
            if namespace.get(name) is value:
                namespace[name] = originals[name]


def placed(namespace: dict, names, device):
    """For the block, bind the named modules/tensors of ``namespace`` to copies on ``device``.

    Copies, not in-place moves: the originals are untouched (the same weights for every device of
    a comparison, and no autograd graph pins them), and are bound again afterwards.
    """
    device = torch.device(device)
    originals = {name: namespace[name] for name in tensors_and_modules(namespace, names)}
    return _rebound(namespace, originals, lambda value: _copy_to(value, device))


def compiled(namespace: dict, names):
    """For the block, bind the named ``nn.Module`` objects to ``torch.compile(module, backend="neuron")``."""
    originals = {name: namespace[name] for name in names
                 if isinstance(namespace.get(name), torch.nn.Module)
                 and not isinstance(namespace[name], torch._dynamo.eval_frame.OptimizedModule)}
    if originals:
        ensure_compile_backend(COMPILE_BACKEND)
    return _rebound(namespace, originals, lambda module: torch.compile(module, backend=COMPILE_BACKEND))
