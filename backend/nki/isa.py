"""``nki.isa`` (``nisa``) as of NKI Beta 1: the hardware instructions with their Beta-1 signatures
(results are returned, not written to a ``dst`` argument). Semantics, limits and costs live in
``backend.nki.instructions``; this module adapts the published signatures to them."""
from __future__ import annotations

import backend.nki.instructions as _ins
from backend.nki.alu import binary
from backend.nki.errors import nki_error
from backend.nki.tensors import as_view
from backend.nki.tracer import current

__all__ = ["nc_matmul", "nc_transpose", "activation", "tensor_tensor", "tensor_scalar", "tensor_reduce",
           "tensor_tensor_scan", "tensor_copy", "bn_stats", "bn_aggr", "memset", "iota", "affine_select",
           "dma_copy", "reciprocal", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
           "unknown_engine", "engine"]

tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = "tensor", "vector", "scalar", "gpsimd", None


class engine:       # noqa: N801  (nisa.engine.vector, as NKI spells it)
    tensor, vector, scalar, gpsimd, unknown = "tensor", "vector", "scalar", "gpsimd", None


def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              mask=None, **kwargs):
    """TensorE: ``stationary[K, M].T @ moving[K, N]`` into a new PSUM tile [M, N] (fp32)."""
    if is_transpose:
        return _ins.transpose(as_view(moving), "tensor")
    return _ins.matmul(as_view(stationary), as_view(moving))


def nc_transpose(data, mask=None, dtype=None, engine=None, **kwargs):
    return _ins.transpose(as_view(data), engine)


def activation(op, data, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    return _ins.activation(op, as_view(data), bias=bias, scale=scale, dtype=dtype, mask=mask)


def tensor_tensor(data1, data2, op, dtype=None, mask=None, **kwargs):
    return _ins.tensor_tensor(as_view(data1), as_view(data2), op, dtype=dtype, mask=mask)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, dtype=None,
                  mask=None, engine=None, **kwargs):
    return _ins.tensor_scalar(as_view(data), op0, operand0, reverse0, op1, operand1, reverse1, dtype=dtype,
                              mask=mask, engine=engine)


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    return _ins.tensor_reduce(op, as_view(data), axis, dtype=dtype, negate=negate, keepdims=keepdims, mask=mask)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None, mask=None,
                       **kwargs):
    return _ins.tensor_tensor_scan(as_view(data0), as_view(data1), initial, op0, op1, reverse0, reverse1,
                                   dtype=dtype, mask=mask)


def tensor_copy(src, mask=None, dtype=None, engine=None, **kwargs):
    return _ins.tensor_copy(as_view(src), dtype=dtype, mask=mask, engine=engine)


def bn_stats(data, mask=None, dtype=None, **kwargs):
    return _ins.bn_stats(as_view(data), dtype=dtype, mask=mask)


def bn_aggr(data, mask=None, dtype=None, **kwargs):
    return _ins.bn_aggr(as_view(data), dtype=dtype, mask=mask)


def memset(shape, value, dtype, mask=None, engine=None, **kwargs):
    return _ins.memset(shape, value, dtype, engine=engine)


def iota(expr, dtype, mask=None, **kwargs):
    return _ins.iota(expr, dtype, mask=mask)


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **kwargs):
    return _ins.affine_select(pred, as_view(on_true_tile), on_false_value, dtype=dtype, mask=mask)


def reciprocal(data, dtype=None, mask=None, **kwargs):
    return _ins.reciprocal(as_view(data), dtype=dtype, mask=mask)


def dma_copy(*args, dst=None, src=None, mask=None, dst_rmw_op=None, **kwargs):
    """One DMA transfer ``src`` -> ``dst`` (either end in HBM or SBUF); with ``dst_rmw_op=np.add``
    the transfer accumulates into ``dst``."""
    if args:
        dst, src = (args + (None, None))[:2] if dst is None else (dst, args[0])
    if dst is None or src is None:
        raise TypeError("dma_copy needs dst= and src=")
    dst_view, src_view = as_view(dst), as_view(src)
    if dst_rmw_op is None:
        _ins.dma(dst_view, src_view, mask)
        return
    name, fn = binary(dst_rmw_op)
    if name != "add":
        raise nki_error("err_unsupported_dma_rmw_op", f"dma_copy supports dst_rmw_op=np.add only, got {name}")
    before = dst_view.read()
    _ins.dma(dst_view, src_view, mask)
    if current().values:
        dst_view.write(fn(before, src_view.read().reshape(dst_view.shape)), mask)

