"""Convolutions: the products a conv op computes, and the engine each one runs on.

Modules, each importing only those above it:

- ``geometry``: the window products and kernel gradient a conv record computes, and their
  window arithmetic (strided phases, halo rows). Emits nothing.
- ``tensor_engine``: TensorE mappings (implicit GEMMs, tap packings, transposed grad_weight).
- ``vector_engine``: VectorE mappings for grouped convs (per-channel multiply-accumulates).
- ``planner``: simulates the candidate mappings and emits the fastest.
- ``lowering``: the registered ``aten::convolution`` family lowering (and grad_bias).

Importing the package registers the lowering.
"""
from backend.lowering.conv import lowering  # noqa: F401  (importing registers the lowering)
from backend.lowering.conv.geometry import KernelGradient, WindowProduct, conv_products, window_product

__all__ = ["WindowProduct", "KernelGradient", "window_product", "conv_products"]
