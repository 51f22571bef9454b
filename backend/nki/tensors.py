"""NKI tensors (in HBM, SBUF or PSUM) and the views indexing makes of them.

A ``Tensor`` is one allocation: its shape (partition axis at ``partition_axis``; block axes before
it, as ``nl.par_dim`` places it), dtype, memory, values (None when the kernel runs for timing
only) and the accesses earlier instructions made to it, from which the tracer derives
dependencies. A ``View`` is an indexed part of a tensor: what instructions read and write.
Arithmetic on tensors and views (``a * b``, ``t[...] += x``) goes to ``nki.language``, which the
tracer registers here as ``OPERATORS`` (this module does not import it).
"""
from __future__ import annotations

from math import prod

import numpy as np

from backend.nki.dtypes import dtype_name, is_float, itemsize, quantize
from backend.nki.errors import nki_error
from backend.nki.indexing import Resolved, resolve, whole_box

__all__ = ["Tensor", "View", "as_view", "OPERATORS", "MEMORIES", "par_dim"]

MEMORIES = ("hbm", "sbuf", "psum")
# Filled by backend.nki.language: name -> function(a, b) for the Python operators, plus
# "accumulate"(view, value) for ``+=`` and "assign"(view, value) for ``t[...] = value``.
OPERATORS: dict = {}


class par_dim(int):
    """``nl.par_dim(128)``: marks the partition axis of a tile shape that has block axes before it."""


class _Operand:
    """What tensors and views share: shape facts and the Python operators."""

    def __add__(self, other):
        return OPERATORS["add"](self, other)

    def __radd__(self, other):
        return OPERATORS["add"](other, self)

    def __sub__(self, other):
        return OPERATORS["subtract"](self, other)

    def __rsub__(self, other):
        return OPERATORS["subtract"](other, self)

    def __mul__(self, other):
        return OPERATORS["multiply"](self, other)

    def __rmul__(self, other):
        return OPERATORS["multiply"](other, self)

    def __truediv__(self, other):
        return OPERATORS["divide"](self, other)

    def __rtruediv__(self, other):
        return OPERATORS["divide"](other, self)

    def __neg__(self):
        return OPERATORS["negative"](self)

    def __pow__(self, other):
        return OPERATORS["power"](self, other)

    def __bool__(self):
        raise nki_error("err_ambiguous_tensor_truth_value",
                        "the truth value of a tile is ambiguous: kernels cannot branch on tile values")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def broadcast_to(self, shape):
        return OPERATORS["broadcast_to"](self, tuple(shape))


class Tensor(_Operand):
    """One allocation in ``memory`` ("hbm", "sbuf" or "psum")."""

    def __init__(self, shape, dtype, memory: str, *, data: np.ndarray | None = None, name: str = "",
                 site=None, values: bool = True, fill=None):
        if memory not in MEMORIES:
            raise nki_error("err_unsupported_memory", f"unsupported memory {memory!r}; expected one of {MEMORIES}")
        shape = tuple(shape)
        self.partition_axis = next((i for i, n in enumerate(shape) if isinstance(n, par_dim)), 0)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype_name(dtype)
        self.memory = memory
        self.name = name
        self.site = site
        if data is not None:
            data = quantize(np.asarray(data).reshape(self.shape), self.dtype)
        elif values:
            # Fresh float tiles hold NaN (as nki.simulate's sentinels do), so reading before writing shows.
            data = np.full(self.shape, np.nan if fill is None else fill, np.float32) if is_float(self.dtype) \
                else np.zeros(self.shape, np.int64)
        self.data = data
        self.accesses: list = []        # (box, instruction, is_write)
        self.prior: set = set()         # what the buffer's previous occupant left to wait for
        self.version = 0
        self.producer: int | None = None     # the instruction that made this tile, while nobody read it
        self.pending_zero = False       # nl.zeros in PSUM whose zeroing the first matmul may absorb
        self.retargeted = False
        self.layout = self.shape         # HBM: the row-major shape its bytes are laid out in
        if memory != "hbm":
            if self.partitions > 128:
                raise nki_error("err_num_partition_exceed_arch_limit",
                                f"tile {list(self.shape)} has {self.partitions} partitions, exceeding the "
                                "architecture limit of 128 (nl.tile_size.pmax)")

    # -- facts -----------------------------------------------------------------------------
    @property
    def partitions(self) -> int:
        return self.shape[self.partition_axis]

    @property
    def bytes_per_partition(self) -> int:
        return prod(self.shape) // max(1, self.partitions) * itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * itemsize(self.dtype)

    def full(self) -> "View":
        whole = self.__dict__.get("_whole")
        if whole is None or whole.box != whole_box(self.shape):
            whole = self._whole = resolve(self.shape, (Ellipsis,))
        return View(self, whole)

    def __repr__(self) -> str:
        return f"<nki tensor {self.name or ''} {list(self.shape)} {self.dtype} in {self.memory}>"

    # -- indexing --------------------------------------------------------------------------
    def __getitem__(self, key) -> "View":
        return View(self, resolve(self.shape, key, clip=True))

    def __setitem__(self, key, value) -> None:
        view = self[key]
        if _already_written(view, value):
            return          # ``t[i] += x`` already wrote t[i]
        OPERATORS["assign"](view, value)

    def __iadd__(self, other):
        OPERATORS["accumulate"](self.full(), other, "add")
        return self

    def __isub__(self, other):
        OPERATORS["accumulate"](self.full(), other, "subtract")
        return self

    def __imul__(self, other):
        OPERATORS["accumulate"](self.full(), other, "multiply")
        return self

    def reshape(self, shape) -> "Tensor":
        """An HBM tensor seen with another shape (the same bytes, C order)."""
        if self.memory != "hbm":
            raise nki_error("err_unsupported_memory", "only HBM tensors can be reshaped; tiles keep their layout")
        shape = tuple(int(n) for n in shape)
        if prod(shape) != prod(self.shape):
            raise ValueError(f"cannot reshape {list(self.shape)} to {list(shape)}")
        alias = Tensor.__new__(Tensor)
        alias.__dict__.update(self.__dict__)
        alias.shape, alias.partition_axis, alias.layout = shape, 0, shape
        alias.data = None if self.data is None else self.data.reshape(shape)
        alias.accesses = []      # tracked in its own coordinates: reshape inputs, not outputs
        alias.base = getattr(self, "base", self)
        return alias


class View(_Operand):
    """Elements of ``tensor`` selected by an index (``resolved``)."""

    __slots__ = ("tensor", "resolved", "written_in_place")

    def __init__(self, tensor: Tensor, resolved: Resolved):
        self.tensor = tensor
        self.resolved = resolved
        self.written_in_place = False

    @property
    def shape(self) -> tuple:
        return self.resolved.shape

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    @property
    def memory(self) -> str:
        return self.tensor.memory

    @property
    def partitions(self) -> int:
        """The view's partition count: its first axis, unless block axes of the tile before the
        partition axis are kept (a whole ``(blocks, par_dim(128), free)`` tile): then the tile's."""
        t = self.tensor
        if t.memory == "hbm" or t.partition_axis == 0 or all(
                isinstance(i, (int, np.integer)) for i in self.resolved.index[:t.partition_axis]):
            return self.shape[0]
        lo, hi = self.box[t.partition_axis]
        return hi - lo

    @property
    def free_size(self) -> int:
        return self.size // self.partitions

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def box(self) -> tuple:
        return self.resolved.box

    def is_whole(self) -> bool:
        return self.box == whole_box(self.tensor.shape)

    def read(self) -> np.ndarray | None:
        data = self.tensor.data
        if data is None:
            return None
        return np.asarray(data[self.resolved.index]).reshape(self.shape)

    def write(self, values, mask=None) -> None:
        data = self.tensor.data
        if data is None or values is None:
            return
        index = self.resolved.index
        natural = np.shape(data[index])
        new = quantize(np.broadcast_to(values, self.shape), self.dtype).reshape(natural)
        if mask is None:
            data[index] = new
            return
        keep = np.broadcast_to(np.asarray(mask, bool), self.shape).reshape(natural)
        if self.resolved.advanced:
            # Only the kept elements: masked-off grid positions may be clamped duplicates of kept ones.
            full = np.broadcast_arrays(*(np.asarray(i) for i in index))
            data[tuple(a.reshape(natural)[keep] for a in full)] = new[keep]
        else:
            data[index] = np.where(keep, new, data[index])

    def __getitem__(self, key) -> "View":
        if key is Ellipsis or key == (Ellipsis,):
            return self
        if self.is_whole():
            return self.tensor[key]
        raise NotImplementedError("indexing a view of a view: index the tensor once with the combined index")

    def __setitem__(self, key, value) -> None:
        view = self[key]
        if _already_written(view, value):
            return
        OPERATORS["assign"](view, value)

    def __iadd__(self, other):
        OPERATORS["accumulate"](self, other, "add")
        self.written_in_place = True
        return self

    def __isub__(self, other):
        OPERATORS["accumulate"](self, other, "subtract")
        self.written_in_place = True
        return self

    def __imul__(self, other):
        OPERATORS["accumulate"](self, other, "multiply")
        self.written_in_place = True
        return self

    def __repr__(self) -> str:
        return f"<nki view {list(self.shape)} {self.dtype} of {self.tensor!r}>"


def _already_written(view: View, value) -> bool:
    """``t[i] op= x`` ends with ``t[i] = <the updated t[i]>``: nothing left to do then."""
    return isinstance(value, View) and value.written_in_place and value.tensor is view.tensor \
        and value.box == view.box


def as_view(value) -> View:
    if isinstance(value, View):
        return value
    if isinstance(value, Tensor):
        return value.full()
    raise TypeError(f"expected an NKI tile or tensor, got {type(value).__name__}")
