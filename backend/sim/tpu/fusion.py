"""XLA-style fusion of an op stream that arrives one op at a time.

TPUs run compiled programs, so even when PyTorch code runs eagerly on the ``neuron`` device the
TPU timeline costs what XLA would build: fusions. The rule, an ASSUMPTION that approximates XLA's
producer-consumer fusion without the graph:

- a matrix-unit op (matmul, conv, attention) starts a new fusion; every other op joins the
  running one (elementwise chains, matmul epilogues, reductions);
- transfers and compiled kernels close the running fusion;
- an intermediate stays in VMEM when the next op of the fusion consumes it. The stream carries
  descriptors, not tensor identities, so "consumes" means: an input with the shape and dtype of
  an output of the op just before (views of it pass through), each output taken by at most one
  input (``t + z`` with z shaped like t saves t once, never z). Its HBM write and read are saved.

Costing a closed fusion is ``cost.fused_cost`` with the saved bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.flops import is_matmul_like, op_flops, storage_bytes

__all__ = ["PendingFusion", "starts_fusion"]


def starts_fusion(record: OpRecord) -> bool:
    """True for ops XLA gives a fusion of their own (the MXU ops)."""
    return bool(is_matmul_like(record.name) and op_flops(record))


def _key(t: TensorDesc) -> tuple:
    return t.shape, t.dtype


@dataclass
class PendingFusion:
    """The fusion being built: its records and the HBM bytes its intermediates save."""

    records: list = field(default_factory=list)
    views: list = field(default_factory=list)      # views fed while the fusion ran; free
    internal_bytes_saved: int = 0
    _live: dict = field(default_factory=dict)      # (shape, dtype) -> bytes, outputs of the last op

    def __bool__(self) -> bool:
        return bool(self.records)

    def accepts(self, record: OpRecord) -> bool:
        return not self.records or not starts_fusion(record)

    def add(self, record: OpRecord) -> None:
        """Append an op, saving the traffic of the intermediates it takes from the op before."""
        for t in record.inputs:
            nbytes = self._live.pop(_key(t), None)
            if nbytes is not None:
                self.internal_bytes_saved += 2 * nbytes      # the producer's write and this read
        self.records.append(record)
        self._live = {_key(t): storage_bytes(t) for t in record.outputs}

    def pass_view(self, record: OpRecord) -> None:
        """Keep a view fed inside the fusion; a view of a live intermediate is live too (XLA fuses
        reshapes and slices as bitcasts)."""
        self.views.append(record)
        if any(_key(t) in self._live for t in record.inputs):
            self._live.update({_key(t): storage_bytes(t) for t in record.outputs})
