"""The math operators NKI instructions take (``op=nl.exp``, ``op0=np.multiply``), by name.

An operator may be given as an ``nki.language`` function, a numpy ufunc or its name; each
resolves to one name and its numpy semantics. Activation functions run on ScalarE; the binary
operators are the ALU operations of VectorE / GpSimdE instructions.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["op_name", "BINARY", "ACTIVATIONS", "binary", "activation_fn"]

_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float32))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "mod": np.mod,
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "max": np.maximum, "min": np.minimum,
}

ACTIVATIONS = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh, "silu": lambda x: x * _sigmoid(x),
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt, "square": np.square, "abs": np.abs,
    "sin": np.sin, "cos": np.cos, "erf": lambda x: _erf(x).astype(np.float32), "sign": np.sign,
    "softplus": lambda x: np.log1p(np.exp(x)), "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "copy": lambda x: x, "identity": lambda x: x, "bypass": lambda x: x, "reciprocal": lambda x: 1.0 / x,
    "arctan": np.arctan,
}

_ALIASES = {"true_divide": "divide", "absolute": "abs", "fmax": "maximum", "fmin": "minimum",
            "amax": "max", "amin": "min", "sum": "add", "prod": "multiply"}


def op_name(op) -> str:
    """The operator's NKI name, from a function, a numpy ufunc or a string."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    if name is None:
        raise TypeError(f"unsupported NKI operator {op!r}")
    return _ALIASES.get(name, name)


def binary(op):
    name = op_name(op)
    fn = BINARY.get(name)
    if fn is None:
        raise ValueError(f"unsupported ALU operator {name!r}; expected one of {', '.join(sorted(BINARY))}")
    return name, fn


def activation_fn(op):
    name = op_name(op)
    fn = ACTIVATIONS.get(name)
    if fn is None:
        raise ValueError(f"unsupported activation function {name!r}; expected one of {', '.join(sorted(ACTIVATIONS))}")
    return name, fn
