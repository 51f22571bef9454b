"""Lowering: an aten op (or a fused group of ops) -> a simulator Program. Never imports torch.

Importing the package registers every op lowering; ``lower`` handles one eager op,
``lower_kernel`` a fused group, ``EagerSession`` / ``simulate`` run op streams.

Structure, bottom up (imports point down this list; op families may use each other's
helpers, never in a cycle):

- ``builder``: ``Builder`` (appends instructions with their memory traffic) and ``OpContext``
  (one op's record, target, ``builder`` and where its operands live).
- ``registry``: the ``@lowering`` decorator and the lookup by aten name.
- ``stream``: tile pipelines (load, a chain of ``vector_stage`` / ``scalar_stage``, store).
- ``gemm``: the blocked TensorE GEMM (a ``TensorEngineGemm`` and its ``BlockedGemmPlan``).
- op families, one module each: ``data`` (copies, fills, host fallback), ``elementwise``,
  ``reductions``, ``matmul``, ``attention``, ``conv`` (a package: ``geometry``,
  ``tensor_engine``, ``vector_engine``, ``planner``, ``lowering``), ``pooling``, ``resample``,
  ``indexing``, ``sorting``, ``losses``, ``foreach``, ``layout``.
- ``eager`` (one op -> Program), ``kernel`` (a fused group -> one Program) and ``timeline``
  (``EagerSession``: an op stream on one simulated NeuronCore).
"""
from backend.lowering import (  # noqa: F401  (importing registers the lowerings)
    attention, collectives, conv, data, elementwise, foreach, indexing, layout, losses, matmul, pooling, reductions, resample,
    sorting,
)
from backend.lowering.eager import lower
from backend.sim.flops import is_matmul_like, op_flops, op_min_bytes
from backend.lowering.kernel import lower_kernel
from backend.lowering.registry import lowering, registered_lowerings
from backend.lowering.timeline import EagerSession, simulate

__all__ = ["op_flops", "is_matmul_like", "op_min_bytes", "lower", "lower_kernel", "lowering",
           "registered_lowerings", "EagerSession", "simulate"]
