"""Lowering: an aten op (or a fused group of ops) -> a simulator Program. Never imports torch.

Importing the package registers every op lowering; ``lower`` handles one eager op,
``lower_kernel`` a fused group, ``EagerSession`` / ``simulate`` run op streams.
"""
from backend.lowering import (  # noqa: F401  (importing registers the lowerings)
    attention, conv, data, elementwise, foreach, indexing, layout, losses, matmul, pooling, reductions, resample,
    sorting,
)
from backend.lowering.eager import lower
from backend.sim.flops import is_matmul_like, op_flops, op_min_bytes
from backend.lowering.kernel import lower_kernel
from backend.lowering.registry import lowering, registered_lowerings
from backend.lowering.session import EagerSession, simulate

__all__ = ["op_flops", "is_matmul_like", "op_min_bytes", "lower", "lower_kernel", "lowering",
           "registered_lowerings", "EagerSession", "simulate"]
