"""torch.compile(backend="neuron"): Dynamo -> AOTAutograd -> fusion -> simulated kernels.

``register()`` (called by ``import workbench``) registers the backend; ``compiled_graphs()``
lists what it compiled, with FX text, fusion groups, per-kernel simulated cost, graph breaks
and recompile reasons.
"""
from .backend import BACKEND_NAME, OPTIONS, SUPPORTED_MODES, is_registered, neuron_backend, register
from .fusion import FusionGroup, fuse
from .kernels import KernelSpec, build_kernels
from .registry import (CompiledGraphInfo, CompiledPartInfo, KernelCost, compiled_graphs, graph_breaks,
                       recompile_reasons, reset)

__all__ = [
    "register", "is_registered", "neuron_backend", "BACKEND_NAME", "SUPPORTED_MODES", "OPTIONS",
    "compiled_graphs", "reset", "graph_breaks", "recompile_reasons", "CompiledGraphInfo",
    "CompiledPartInfo", "KernelCost", "FusionGroup", "fuse", "KernelSpec", "build_kernels",
]
