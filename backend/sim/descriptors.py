"""Plain descriptors that cross from the PyTorch side into lowering and the simulator.

No torch here: the device layer converts tensors into these, so the simulator can be
built, tested and reasoned about without PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

__all__ = ["TensorDesc", "OpRecord", "DTYPE_BYTES"]

# Bytes per element for the dtype names the device reports (torch dtype names without "torch.").
DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
}


@dataclass(frozen=True, slots=True)
class TensorDesc:
    """Shape, dtype and layout of one tensor argument; never the data."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def contiguous_strides(self) -> tuple[int, ...]:
        """Row-major strides of this shape."""
        strides, expected = [], 1
        for size in reversed(self.shape):
            strides.append(expected)
            expected *= size
        return tuple(reversed(strides))

    @property
    def is_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


@dataclass(slots=True)
class OpRecord:
    """One op the device executed (eager) or one fused kernel (compiled).

    name: aten overload as ``"aten::mm"`` style (namespace::op, overload dropped), or a kernel
        name for compiled programs.
    attrs: the few non-tensor arguments that change cost (dim, stride, padding, ...), as plain
        Python values.
    is_view: the op only aliases its input (views cost nothing on the device).
    fallback: the op ran on the host because nothing lowers it; it is costed as transfers.
    transfer: "h2d" / "d2h" for host<->device copies, else None.
    source: user source line (``file:line``) where known.
    """

    index: int
    name: str
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]
    attrs: dict = field(default_factory=dict)
    is_view: bool = False
    fallback: bool = False
    transfer: str | None = None
    source: str | None = None

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)
