"""``nki.language`` (``nl``) as of NKI Beta 1 (``neuronxcc.nki``, Neuron SDK 2.20-2.26): tensors,
loads and stores, index grids, loops, and the arithmetic that lowers to ISA instructions.

Engine choices follow what the NKI compiler does with these calls: transcendental functions run
as ScalarE ``activation``; tile-tile arithmetic is VectorE ``tensor_tensor``; arithmetic with a
number or a [P, 1] tile is VectorE ``tensor_scalar``; reductions are VectorE ``tensor_reduce``;
``nl.copy`` is VectorE ``tensor_copy``; ``nl.matmul`` / ``nl.transpose`` run on TensorE into PSUM.
A [1, F] row broadcast across partitions is a TensorE matmul by a ones column (the Mamba
tutorial's mapping). ``nl.zeros`` in PSUM costs nothing when a matmul accumulation is its first
writer (the matmul's start flag zeroes the bank); anywhere else it is a ``memset``.
"""
from __future__ import annotations

import builtins
import operator
from types import SimpleNamespace

import numpy as np

import backend.nki.instructions as isa
from backend.nki.alu import ACTIVATIONS
from backend.nki.dtypes import dtype_name, promote
from backend.nki.errors import nki_error
from backend.nki.indexing import mgrid
from backend.nki.tensors import OPERATORS, Tensor, View, as_view, par_dim
from backend.nki.tracer import current

__all__ = [
    "sbuf", "psum", "hbm", "shared_hbm", "private_hbm", "tile_size", "par_dim", "arange", "mgrid",
    "affine_range", "sequential_range", "static_range", "ndarray", "zeros", "ones", "full", "zeros_like",
    "ones_like", "empty_like", "load", "store", "copy", "matmul", "transpose", "program_id", "num_programs",
    "float32", "bfloat16", "float16", "tfloat32", "int32", "uint32", "int16", "uint16", "int8", "uint8", "bool_",
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal", "greater",
    "greater_equal", "less", "less_equal", "negative", "reciprocal", "sum", "max", "min", "mean", "prod",
    *sorted(set(ACTIVATIONS) - {"copy", "identity", "bypass", "reciprocal"}),
]

sbuf, psum, hbm, shared_hbm, private_hbm = "sbuf", "psum", "hbm", "hbm", "hbm"
float32, bfloat16, float16, tfloat32 = "float32", "bfloat16", "float16", "tfloat32"
int32, uint32, int16, uint16, int8, uint8, bool_ = "int32", "uint32", "int16", "uint16", "int8", "uint8", "bool_"

tile_size = SimpleNamespace(pmax=isa.MAX_PARTITIONS, psum_fmax=512, gemm_stationary_fmax=isa.STATIONARY_FMAX,
                            gemm_moving_fmax=isa.MOVING_FMAX, bn_stats_fmax=isa.BN_STATS_FMAX,
                            psum_partition=isa.MAX_PARTITIONS)


def arange(*args) -> np.ndarray:
    """An index grid axis: ``nl.arange(128)[:, None]`` for partitions, ``[None, :]`` for free."""
    return np.arange(*args)


def affine_range(*args):
    """Iterations with no loop-carried dependency (the compiler may pipeline them): here the
    dependencies come from the data each iteration touches, so this is an ordinary range."""
    return range(*args)


sequential_range = affine_range
static_range = affine_range


def program_id(axis: int = 0) -> int:
    return current().program_ids[axis] if axis < len(current().program_ids) else 0


def num_programs(axis: int = 0) -> int:
    grid = current().grid
    return grid[axis] if axis < len(grid) else 1


# -- tensors -----------------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> Tensor:
    return current().allocate(shape, dtype, _memory(buffer), name=name)


def _memory(buffer) -> str:
    name = buffer if isinstance(buffer, str) else getattr(buffer, "name", str(buffer))
    if name not in ("sbuf", "psum", "hbm"):
        raise nki_error("err_unsupported_memory", f"unsupported buffer {buffer!r}; use nl.sbuf, nl.psum or nl.shared_hbm")
    return name


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "", **kwargs) -> Tensor:
    tr = current()
    memory = _memory(buffer)
    tensor = tr.allocate(shape, dtype, memory, name=name, fill=fill_value)
    if memory == "psum" and fill_value == 0:
        tensor.pending_zero = True
    elif memory != "hbm":
        isa.memset(None, fill_value, dtype, into=tensor.full())
    return tensor


def zeros(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> Tensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> Tensor:
    return full(shape, 1, dtype, buffer, name)


def zeros_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> Tensor:
    return zeros(a.shape, dtype or a.dtype, buffer or getattr(a, "memory", sbuf), name)


def ones_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> Tensor:
    return ones(a.shape, dtype or a.dtype, buffer or getattr(a, "memory", sbuf), name)


def empty_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> Tensor:
    return ndarray(a.shape, dtype or a.dtype, buffer or getattr(a, "memory", sbuf), name)


# -- memory ------------------------------------------------------------------------------------
def load(src, mask=None, dtype=None, **kwargs) -> Tensor:
    """HBM -> a new SBUF tile (one ``dma_copy``)."""
    view = as_view(src)
    if view.memory != "hbm":
        raise nki_error("err_unsupported_memory", "nl.load reads HBM tensors; this tile is already on chip")
    tr = current()
    out = tr.allocate(view.shape, dtype or view.dtype, "sbuf")
    index = isa.dma(out.full(), view, mask)
    return tr.produced(out, index)


def store(dst, value, mask=None, **kwargs) -> None:
    """An SBUF (or PSUM) tile -> HBM (one ``dma_copy``)."""
    view = as_view(dst)
    if view.memory != "hbm":
        raise nki_error("err_unsupported_memory", "nl.store writes HBM tensors; assign on-chip tiles with t[...] = x")
    value = _tile_or_fill(value, view.shape, view.dtype)
    isa.dma(view, as_view(value), mask)


def _tile_or_fill(value, shape, dtype):
    if isinstance(value, (View, Tensor)):
        return value
    return full(shape, value, dtype)


def copy(x, dtype=None, mask=None, **kwargs) -> Tensor:
    return isa.tensor_copy(as_view(x), dtype=dtype, mask=mask)


def matmul(x, y, transpose_x: bool = False, mask=None, **kwargs) -> Tensor:
    """``x @ y`` into PSUM (fp32). With ``transpose_x`` x is given as [K, M] (the stationary
    layout); otherwise x [M, K] is first transposed on TensorE, as the compiler would."""
    vx, vy = as_view(x), as_view(y)
    if not transpose_x:
        vx = as_view(_to_sbuf(isa.transpose(vx), vx.dtype))
    return isa.matmul(vx, vy)


def transpose(x, dtype=None, mask=None, **kwargs) -> Tensor:
    return isa.transpose(as_view(x))


def _to_sbuf(tile: Tensor, dtype) -> Tensor:
    return isa.tensor_copy(tile.full(), dtype=dtype)


def _is_tile(x) -> bool:
    return isinstance(x, (View, Tensor))


_PYTHON = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv,
           "power": operator.pow, "maximum": builtins.max, "minimum": builtins.min, "equal": operator.eq,
           "not_equal": operator.ne, "greater": operator.gt, "greater_equal": operator.ge, "less": operator.lt,
           "less_equal": operator.le}


def _binary(name: str, a, b, dtype=None, mask=None):
    if not _is_tile(a) and not _is_tile(b):
        return _PYTHON[name](a, b)
    if not _is_tile(a):
        return isa.tensor_scalar(as_view(b), name, a, reverse0=True, dtype=dtype, mask=mask)
    if not _is_tile(b):
        return isa.tensor_scalar(as_view(a), name, b, dtype=dtype, mask=mask)
    va, vb = as_view(a), as_view(b)
    out_dtype = dtype_name(dtype) if dtype is not None else promote(va.dtype, vb.dtype)
    if va.partitions == vb.partitions:
        if vb.free_size == 1 and va.free_size > 1:
            return isa.tensor_scalar(va, name, vb, dtype=out_dtype, mask=mask)
        if va.free_size == 1 and vb.free_size > 1:
            return isa.tensor_scalar(vb, name, va, reverse0=True, dtype=out_dtype, mask=mask)
    elif va.partitions == 1 or vb.partitions == 1:
        if va.partitions == 1:
            va = as_view(isa.broadcast_partitions(va, vb.partitions))
        else:
            vb = as_view(isa.broadcast_partitions(vb, va.partitions))
    return isa.tensor_tensor(va, vb, name, dtype=out_dtype, mask=mask)


def _make_binary(name: str):
    def fn(x, y, dtype=None, mask=None, **kwargs):
        return _binary(name, x, y, dtype, mask)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of two tiles (VectorE tensor_tensor) or a tile and a scalar (tensor_scalar)."
    return fn


add, subtract, multiply, divide, maximum, minimum, power = (
    _make_binary(n) for n in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power"))
equal, not_equal, greater, greater_equal, less, less_equal = (
    _make_binary(n) for n in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal"))


def _make_activation(name: str):
    def fn(x, dtype=None, mask=None, **kwargs):
        return isa.activation(name, as_view(x), dtype=dtype, mask=mask)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` on ScalarE (one activation instruction)."
    return fn


for _name in sorted(set(ACTIVATIONS) - {"copy", "identity", "bypass", "reciprocal"}):
    globals()[_name] = _make_activation(_name)


def negative(x, dtype=None, mask=None, **kwargs):
    return isa.tensor_scalar(as_view(x), "multiply", -1.0, dtype=dtype, mask=mask)


def reciprocal(x, dtype=None, mask=None, **kwargs):
    return isa.reciprocal(as_view(x), dtype=dtype, mask=mask)


def _make_reduce(name: str, alu: str):
    def fn(x, axis, dtype=None, keepdims=False, mask=None, **kwargs):
        return isa.tensor_reduce(alu, as_view(x), axis, dtype=dtype, keepdims=keepdims, mask=mask)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}`` along free axes (VectorE tensor_reduce)."
    return fn


sum = _make_reduce("sum", "add")            # noqa: A001  (NKI's names)
max = _make_reduce("max", "maximum")        # noqa: A001
min = _make_reduce("min", "minimum")        # noqa: A001
prod = _make_reduce("prod", "multiply")


def mean(x, axis, dtype=None, keepdims=False, mask=None, **kwargs):
    """Sum along free axes, then scale by 1/n (tensor_reduce + tensor_scalar)."""
    view = as_view(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = 1
    for a in axes:
        n *= view.shape[a]
    total = isa.tensor_reduce("add", view, axis, dtype=dtype, keepdims=keepdims, mask=mask)
    return isa.tensor_scalar(total.full(), "multiply", 1.0 / n)


# -- operators on tiles ------------------------------------------------------------------------
def _accumulate(view: View, value, name: str) -> None:
    """``t[...] op= value``: a matmul just made into PSUM accumulates in place (TensorE's
    accumulate flag); anything else is one instruction reading and writing ``t[...]``."""
    tr = current()
    if (isinstance(value, Tensor) and name == "add" and value.memory == "psum" and view.memory == "psum"
            and value.producer is not None
            and tr.program.instructions[value.producer].engine == "tensor"):
        product = value.full().read()
        before = view.read()
        if tr.retarget(value, view):
            view.tensor.pending_zero = False
            if tr.values:
                view.write(before + product)
            return
    _assign(view, _binary(name, view, value))


def _assign(view: View, value) -> None:
    """``t[...] = value``: the instruction that made ``value`` writes ``t`` directly when it can;
    otherwise a copy (``tensor_copy``), a fill (``memset``) or a transfer (``dma_copy``)."""
    tr = current()
    if not _is_tile(value):
        if view.memory == "hbm":
            store(view, value)
        else:
            isa.memset(None, value, view.dtype, into=view)
        return
    if isinstance(value, Tensor) and value.producer is not None:
        values = value.full().read()
        if tr.retarget(value, view):
            if tr.values:
                view.write(values.reshape(view.shape))
            return
    src = as_view(value)
    if view.memory == "hbm" or src.memory == "hbm":
        isa.dma(view, src)
        return
    copied = isa.tensor_copy(src, dtype=view.dtype)
    values = copied.full().read()
    if not tr.retarget(copied, view):
        raise RuntimeError("internal: a copy just made could not be redirected")
    if tr.values:
        view.write(values.reshape(view.shape))


def _broadcast_to(x, shape: tuple):
    view = as_view(x)
    if tuple(view.shape) == shape:
        return x
    if view.partitions == 1 and shape[0] != 1 and view.free_size == int(np.prod(shape[1:])):
        return isa.broadcast_partitions(view, shape[0])
    if view.partitions == shape[0] and view.free_size == 1:
        return isa.compute("vector", "tensor_copy", [view], shape, view.dtype,
                        lambda v: np.broadcast_to(v.reshape(shape[0], *([1] * (len(shape) - 1))), shape),
                        free_size=int(np.prod(shape[1:])), flops_per_element=0)
    raise nki_error("err_size_of_dimension_exceed_arch_limit",
                    f"cannot broadcast a tile {list(view.shape)} to {list(shape)}")


OPERATORS.update({name: globals()[name] for name in ("add", "subtract", "multiply", "divide", "negative", "power")})
OPERATORS["broadcast_to"] = _broadcast_to
OPERATORS["accumulate"] = _accumulate
OPERATORS["assign"] = _assign
