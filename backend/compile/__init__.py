"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> fusion -> simulated kernels.

A peer of ``backend.device``: neither imports the other. Both sit on ``backend.recording`` (the
op stream compiled kernels are fed to, the selected target), which sits on ``backend.lowering``
and ``backend.sim``.

- ``entry_point``: how torch finds the backend by name (the ``torch_dynamo_backends`` entry
  point, or ``declare()`` where the installed metadata lacks it) without importing Dynamo early;
  ``plugin`` is what that entry point loads.
- ``backend``: the Dynamo backend (``neuron_backend``, options, modes, ``register()``).
- ``fusion`` partitions aten graphs into kernels, ``kernels`` describes them as op records,
  ``feed`` hands them to the sinks, ``runtime`` runs compiled graphs.
- ``graph_log``: what was compiled (FX text, fusion groups, breaks, recompiles), with per-kernel
  cost from ``costing``.
- ``state``: the layer's process-wide state in one object (the graph log's entries, Dynamo
  bookkeeping), with ``reset()`` for tests.

Importing this package imports neither Dynamo nor the compiler: names load on first use.
"""
from importlib import import_module

from .entry_point import BACKEND_NAME, declare

# public name -> submodule that defines it (imported lazily, PEP 562)
_LAZY = {
    "register": "backend", "is_registered": "backend", "neuron_backend": "backend",
    "SUPPORTED_MODES": "backend", "OPTIONS": "backend",
    "compiled_graphs": "graph_log", "reset": "graph_log", "graph_breaks": "graph_log",
    "recompile_reasons": "graph_log", "CompiledGraphInfo": "graph_log",
    "CompiledPartInfo": "graph_log", "KernelCost": "costing",
    "FusionGroup": "fusion", "fuse": "fusion", "KernelSpec": "kernels", "build_kernels": "kernels",
}
__all__ = ["BACKEND_NAME", "declare", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'backend.compile' has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
