"""NKI data types: names, sizes, and the rounding a value gets when a tile of that type holds it.

Values are kept in float32 (or int64 for integer types) numpy arrays and rounded to the tile's
type on every write, so a bf16 tile holds exactly the values bf16 can represent; numpy has no
bfloat16, so its round-to-nearest-even is done on the float32 bit pattern.
"""
from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "dtype_name", "itemsize", "is_float", "quantize", "promote"]

# name -> bytes per element
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "tfloat32": 4, "float8_e4m3": 1, "float8_e5m2": 1,
          "int32": 4, "uint32": 4, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool_": 1}
_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32",
            "bool": "bool_", "int64": "int32", "float64": "float32", "double": "float32"}


def dtype_name(dtype) -> str:
    """The NKI name of ``dtype``: a name, a numpy dtype or type, or anything whose str ends in one
    (``torch.bfloat16``)."""
    if dtype is None:
        raise TypeError("dtype must not be None")
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type) and issubclass(dtype, np.generic):
        name = np.dtype(dtype).name
    elif isinstance(dtype, np.dtype):
        name = dtype.name
    else:
        name = str(dtype)
    name = name.rsplit(".", 1)[-1]
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise TypeError(f"unsupported NKI dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def itemsize(dtype) -> int:
    return DTYPES[dtype_name(dtype)]


def is_float(dtype) -> bool:
    return dtype_name(dtype).startswith(("float", "bfloat", "tfloat"))


def _round_bf16(x: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = np.isnan(x)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = rounded.view(np.float32)
    return np.where(nan, np.float32(np.nan), out)


def quantize(values, dtype) -> np.ndarray:
    """``values`` as a tile of ``dtype`` holds them (float32 or int64 storage)."""
    name = dtype_name(dtype)
    x = np.asarray(values)
    if name == "float32" or name == "tfloat32":
        return x.astype(np.float32, copy=False)
    if name == "bfloat16":
        return _round_bf16(x.astype(np.float32, copy=False))
    if name == "float16":
        return x.astype(np.float16).astype(np.float32)
    if name.startswith("float8"):
        return _round_bf16(x.astype(np.float32, copy=False))     # storage only; fp8 rounding not modelled
    if name == "bool_":
        return (x != 0).astype(np.int64)
    info = np.iinfo(np.dtype(name))
    return np.clip(np.trunc(np.nan_to_num(x.astype(np.float64))), info.min, info.max).astype(np.int64)


def promote(a: str, b: str) -> str:
    """NKI's type promotion of two operands: float beats int, and between floats the wider wins
    (bf16 with fp16 gives fp32)."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa != fb:
        return a if fa else b
    if fa:
        if DTYPES[a] != DTYPES[b]:
            return a if DTYPES[a] > DTYPES[b] else b
        return "float32"
    return a if DTYPES[a] >= DTYPES[b] else b
