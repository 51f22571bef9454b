"""The NKI ISA, one function per instruction: check its tile limits, emit it (through the tracer,
so it is costed by ``backend.sim.costs`` and scheduled with its data's dependencies) and compute
its values with numpy.

Engines and opcodes follow the NKI ISA: ``nc_matmul`` / ``nc_transpose`` on TensorE (into PSUM,
fp32), ``activation`` on ScalarE, ``tensor_tensor``, ``tensor_scalar``, ``tensor_reduce``,
``tensor_tensor_scan``, ``tensor_copy``, ``bn_stats`` / ``bn_aggr``, ``memset`` and
``reciprocal`` on VectorE (``tensor_scalar``, ``tensor_copy`` and ``memset`` also on ScalarE or
GpSimdE when asked), ``iota`` and ``affine_select`` on GpSimdE, transfers as ``dma_copy``.
Values are computed in float32 and rounded to the output tile's dtype (``dtypes.quantize``);
matmuls read their (already rounded) inputs and accumulate in float32, as PSUM does.
"""
from __future__ import annotations

from math import prod

import numpy as np

from backend.nki.alu import activation_fn, binary, op_name
from backend.nki.dtypes import dtype_name, itemsize, promote
from backend.nki.errors import nki_error
from backend.nki.indexing import _tile_shape
from backend.nki.tensors import Tensor, View, as_view
from backend.nki.tracer import current

__all__ = ["dma", "matmul", "transpose", "compute", "tensor_tensor", "tensor_scalar", "activation",
           "tensor_reduce", "tensor_tensor_scan", "tensor_copy", "bn_stats", "bn_aggr", "memset", "iota",
           "affine_select", "reciprocal", "broadcast_partitions", "MAX_PARTITIONS", "MOVING_FMAX",
           "STATIONARY_FMAX", "BN_STATS_FMAX", "run_bytes"]

MAX_PARTITIONS = 128
STATIONARY_FMAX = 128
MOVING_FMAX = 512
BN_STATS_FMAX = 512
_ENGINES = {"vector": "vector", "scalar": "scalar", "gpsimd": "gpsimd", "tensor": "tensor", None: None}


def _on_chip(v: View, what: str) -> None:
    if v.memory == "hbm":
        raise nki_error("err_unsupported_memory",
                        f"{what}: operand {list(v.shape)} is in HBM; engines read SBUF/PSUM tiles: load it with nl.load")


def _in_bounds(views, mask, what: str) -> None:
    """Grid indices past the end of a tensor are legal only where a mask excludes them."""
    for v in views:
        if v.resolved.clipped and mask is None:
            lo_hi = [f"[{lo}, {hi})" for lo, hi in v.box]
            raise nki_error("err_tensor_access_out_of_bound",
                            f"{what}: index grid reaches past the end of tensor {list(v.tensor.shape)} "
                            f"(touching {', '.join(lo_hi)}); pass a mask= that excludes those elements")


def _partitions(v: View, what: str) -> int:
    if v.partitions > MAX_PARTITIONS:
        raise nki_error("err_num_partition_exceed_arch_limit",
                        f"{what}: {v.partitions} partitions in tile {list(v.shape)} exceed the architecture "
                        f"limit of {MAX_PARTITIONS} (nl.tile_size.pmax)")
    return v.partitions


def _mask_count(shape, mask) -> tuple[int, int]:
    """(elements, partitions) a mask leaves active in a tile of ``shape``."""
    if mask is None:
        return prod(shape), shape[0]
    keep = np.broadcast_to(np.asarray(mask, bool), shape)
    rows = keep.reshape(shape[0], -1).any(axis=1)
    return int(keep.sum()), int(rows.sum())


def run_bytes(v: View) -> int:
    """Contiguous bytes per descriptor of a DMA touching an HBM view (C-order tensor)."""
    run = itemsize(v.dtype)
    r = v.resolved
    for n, extent, contiguous in reversed(list(zip(v.tensor.layout, r.extents, r.contiguous))):
        if not contiguous:
            break
        run *= extent
        if extent != n:
            break
    return run


# -- data movement -----------------------------------------------------------------------------
def dma(dst: View, src: View, mask=None) -> int:
    """One transfer from ``src`` to ``dst`` (the ``dma_copy`` behind ``nl.load`` / ``nl.store``)."""
    tr = current()
    _in_bounds((dst, src), mask, "dma")
    if dst.size != src.size and src.partitions != 1:
        raise nki_error("err_store_dst_shape_smaller_than_other_shape",
                        f"transfer of {list(src.shape)} into {list(dst.shape)}: shapes differ")
    on_chip = dst if dst.memory != "hbm" else src
    if on_chip.memory != "hbm":
        _partitions(on_chip, "dma")
    elements, partitions = _mask_count(on_chip.shape, mask)
    hbm_side = src if src.memory == "hbm" else dst if dst.memory == "hbm" else None
    row = run_bytes(hbm_side) if hbm_side is not None else on_chip.free_size * itemsize(on_chip.dtype)
    nbytes = elements * itemsize(dst.dtype)
    index = tr.emit("dma", "dma", [src], [dst], nbytes=nbytes, src=src.memory, dst=dst.memory,
                    partitions=max(1, partitions), row_bytes=min(row, max(1, nbytes)),
                    src_bytes=elements * itemsize(src.dtype), queue=tr.dma_queue())
    if tr.values:
        dst.write(src.read().reshape(dst.shape) if src.size == dst.size else src.read(), mask)
    return index


def broadcast_partitions(v: View, partitions: int) -> Tensor:
    """A [1, F] tile copied to ``partitions`` partitions. Engines work per partition, so this is an
    instruction: a TensorE matmul of a ones column by the row (into PSUM, fp32) when the row fits
    a PSUM bank, as the NKI Mamba tutorial describes it; otherwise a DMA from one partition to all."""
    tr = current()
    shape = (partitions, *v.shape[1:])
    free = v.free_size
    if free * 4 <= tr.target.psum_bank_bytes:
        out = tr.allocate(shape, "float32", "psum")
        index = tr.emit("matmul", "tensor", [v], [out.full()], k=1, m=partitions, n=free, dtype=dtype_name(v.dtype))
    else:
        out = tr.allocate(shape, v.dtype, "sbuf")
        size = itemsize(v.dtype)
        index = tr.emit("dma", "dma", [v], [out.full()], nbytes=partitions * free * size, src=v.memory, dst="sbuf",
                        partitions=partitions, row_bytes=free * size, src_bytes=free * size,
                        queue=tr.dma_queue())
    if tr.values:
        out.full().write(np.broadcast_to(v.read(), shape))
    return tr.produced(out, index)


# -- TensorE -----------------------------------------------------------------------------------
def matmul(stationary: View, moving: View) -> Tensor:
    """``nc_matmul``: stationary [K, M] and moving [K, N] (K on partitions) -> PSUM [M, N] fp32,
    ``stationary.T @ moving``. K <= 128, M <= 128, N <= 512."""
    tr = current()
    for v, role in ((stationary, "stationary"), (moving, "moving")):
        _on_chip(v, f"nc_matmul {role}")
        if v.memory == "psum":
            raise nki_error("err_unsupported_memory", f"nc_matmul: the {role} operand must be in SBUF, not PSUM")
        _partitions(v, f"nc_matmul {role}")
    k, m = stationary.partitions, stationary.free_size
    k2, n = moving.partitions, moving.free_size
    if k != k2:
        raise nki_error("err_num_partition_mismatch",
                        f"nc_matmul: contraction (partition) sizes differ: stationary {list(stationary.shape)}, "
                        f"moving {list(moving.shape)}")
    if m > STATIONARY_FMAX:
        raise nki_error("err_size_of_dimension_exceed_arch_limit",
                        f"nc_matmul: stationary free size {m} exceeds {STATIONARY_FMAX} "
                        "(nl.tile_size.gemm_stationary_fmax)")
    if n > MOVING_FMAX:
        raise nki_error("err_size_of_dimension_exceed_arch_limit",
                        f"nc_matmul: moving free size {n} exceeds {MOVING_FMAX} (nl.tile_size.gemm_moving_fmax)")
    dtype = promote(stationary.dtype, moving.dtype)
    out = tr.allocate((m, n), "float32", "psum")
    index = tr.emit("matmul", "tensor", [stationary, moving], [out.full()], k=k, m=m, n=n, dtype=dtype)
    if tr.values:
        a = stationary.read().reshape(k, m).astype(np.float32)
        b = moving.read().reshape(k, n).astype(np.float32)
        out.full().write(a.T @ b)
    return tr.produced(out, index)


def transpose(data: View, engine: str | None = None) -> Tensor:
    """``nc_transpose``: [P, F] -> [F, P]; on TensorE (into PSUM, P, F <= 128, a matmul by the
    identity) or on VectorE (32 x 32 at most, into SBUF)."""
    tr = current()
    _on_chip(data, "nc_transpose")
    p, f = data.partitions, data.free_size
    engine = engine or "tensor"
    if engine == "vector":
        if p > 32 or f > 32:
            raise nki_error("err_size_of_dimension_exceed_arch_limit",
                            f"nc_transpose on VectorE handles at most 32 x 32, got {list(data.shape)}")
        out = tr.allocate((f, p), data.dtype, "sbuf")
        index = tr.emit("compute", "vector", [data], [out.full()], opcode="nc_transpose", free_size=f, partitions=p,
                        dtype=data.dtype, src=data.memory)
    else:
        if p > MAX_PARTITIONS or f > STATIONARY_FMAX:
            raise nki_error("err_size_of_dimension_exceed_arch_limit",
                            f"nc_transpose on TensorE handles at most 128 x 128, got {list(data.shape)}")
        out = tr.allocate((f, p), "float32", "psum")
        index = tr.emit("matmul", "tensor", [data], [out.full()], k=p, m=f, n=p, dtype=data.dtype,
                        opcode="nc_transpose")
    if tr.values:
        out.full().write(data.read().reshape(p, f).T)
    return tr.produced(out, index)


# -- Vector / Scalar / GpSimd --------------------------------------------------------------------
def compute(engine: str, opcode: str, inputs, shape, dtype, fn, *, operands=(), free_size=None,
            n_inputs=None, flops_per_element: int = 1, memory: str = "sbuf", mask=None, attrs=None) -> Tensor:
    """One streaming instruction over ``inputs`` (views) producing a new tile of ``shape``.

    ``operands``: views read besides the streamed inputs (per-partition scalars, initial values);
    ``fn(*input_values, *operand_values)`` computes the result."""
    tr = current()
    reads = [*inputs, *operands]
    _in_bounds(reads, mask, opcode)
    for v in reads:
        _on_chip(v, opcode)
        _partitions(v, opcode)
    if engine == "gpsimd" and any(v.memory == "psum" for v in reads):
        raise nki_error("err_unsupported_memory", f"{opcode}: GpSimdE cannot access PSUM")
    shape = tuple(shape)
    if shape[0] > MAX_PARTITIONS:
        raise nki_error("err_num_partition_exceed_arch_limit",
                        f"{opcode}: {shape[0]} partitions exceed the architecture limit of {MAX_PARTITIONS}")
    attrs = dict(attrs or {})
    mask_key = None if mask is None else (np.shape(mask), np.asarray(mask, bool).tobytes())
    key = tr.key(opcode, reads, engine, shape, dtype, tuple(sorted(attrs.items())), mask_key)
    hit = tr.hoisted(key, reads)
    if hit is not None:
        return hit
    psum_in = any(v.memory == "psum" for v in inputs)
    if psum_in and opcode == "tensor_tensor":
        attrs["psum_input"] = True
    in_dtype = inputs[0].dtype if inputs else dtype
    for v in inputs[1:]:
        in_dtype = promote(in_dtype, v.dtype)
    free = free_size if free_size is not None else (inputs[0].free_size if inputs else prod(shape[1:]))
    partitions = inputs[0].partitions if inputs else shape[0]
    out = tr.allocate(shape, dtype, memory)
    index = tr.emit("compute", engine, reads, [out.full()], opcode=opcode, free_size=free, partitions=partitions,
                    dtype=in_dtype, out_dtype=dtype, n_inputs=n_inputs if n_inputs is not None else max(1, len(inputs)),
                    src="psum" if psum_in else "sbuf", dst=memory, flops=flops_per_element * partitions * free, **attrs)
    if tr.values:
        out.full().write(fn(*(np.asarray(v.read(), np.float64) for v in reads)), mask)
    tr.remember(key, reads, out)
    return tr.produced(out, index)


def _scalar_operand(value, what: str):
    """A per-partition scalar operand: a Python number, or a [P, 1] tile. Returns (view or None, number)."""
    if isinstance(value, (View, Tensor)):
        v = as_view(value)
        if v.free_size != 1:
            raise nki_error("err_activation_scale_scalar_or_vector" if what in ("scale", "bias") else
                            "err_num_partition_mismatch",
                            f"{what} must be a scalar or a [P, 1] tile (one value per partition), got {list(v.shape)}")
        return v, None
    return None, float(value)


def tensor_tensor(a: View, b: View, op, dtype=None, mask=None, engine: str = "vector") -> Tensor:
    name, fn = binary(op)
    if a.partitions != b.partitions or a.free_size != b.free_size:
        raise nki_error("err_num_partition_mismatch",
                        f"tensor_tensor {name}: operand shapes {list(a.shape)} and {list(b.shape)} differ "
                        "(broadcast a [1, F] row with .broadcast_to, or use a [P, 1] tile as a tensor_scalar operand)")
    if a.memory == "psum" and b.memory == "psum":
        raise nki_error("err_unsupported_memory", "tensor_tensor: at most one operand may be in PSUM")
    out_dtype = dtype_name(dtype) if dtype is not None else promote(a.dtype, b.dtype)
    return compute(engine, "tensor_tensor", [a, b], a.shape, out_dtype,
                   lambda x, y: fn(x, y.reshape(x.shape)), n_inputs=2, mask=mask, attrs={"alu": name})


def tensor_scalar(data: View, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  dtype=None, mask=None, engine: str | None = None) -> Tensor:
    """``op1(op0(data, operand0), operand1)`` with per-partition scalar operands (``reverse``: the
    operand comes first)."""
    name0, fn0 = binary(op0)
    v0, c0 = _scalar_operand(operand0, "operand0")
    steps = [(fn0, v0, c0, reverse0)]
    alus = [name0]
    if op1 is not None:
        name1, fn1 = binary(op1)
        v1, c1 = _scalar_operand(operand1, "operand1")
        steps.append((fn1, v1, c1, reverse1))
        alus.append(name1)
    operands = [v for _, v, _, _ in steps if v is not None]

    def run(x, *tiles):
        it = iter(tiles)
        for fn, v, c, reverse in steps:
            s = next(it) if v is not None else c
            x = fn(s, x) if reverse else fn(x, s)
        return x

    out_dtype = dtype_name(dtype) if dtype is not None else data.dtype
    return compute(_ENGINES[engine] or "vector", "tensor_scalar", [data], data.shape, out_dtype, run,
                   operands=operands, mask=mask, attrs={"alu": "+".join(alus)})


def activation(op, data: View, bias=None, scale=1.0, dtype=None, mask=None) -> Tensor:
    """ScalarE ``func(data * scale + bias)``; scale a number or a [P, 1] tile, bias a [P, 1] tile."""
    name, fn = activation_fn(op)
    vs, cs = _scalar_operand(scale, "scale")
    vb, cb = _scalar_operand(bias, "bias") if bias is not None else (None, 0.0)
    operands = [v for v in (vs, vb) if v is not None]

    def run(x, *tiles):
        it = iter(tiles)
        s = next(it) if vs is not None else cs
        b = next(it) if vb is not None else cb
        return fn(x * s + b)

    out_dtype = dtype_name(dtype) if dtype is not None else data.dtype
    return compute("scalar", "activation", [data], data.shape, out_dtype, run, operands=operands, mask=mask,
                   flops_per_element=4, attrs={"func": name})


def _axes(axis, ndim: int) -> tuple:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % ndim for a in axes)
    if 0 in axes:
        raise nki_error("err_unsupported_reduction_axis",
                        "reductions run along free axes; the partition axis (0) cannot be reduced by "
                        "tensor_reduce: transpose it onto the free axis (nc_transpose) or use a matmul by ones")
    return axes


def tensor_reduce(op, data: View, axis, dtype=None, negate=False, keepdims=False, mask=None) -> Tensor:
    name, fn = binary(op)
    axes = _axes(axis, len(data.shape))
    shape = [1 if i in axes else n for i, n in enumerate(data.shape)] if keepdims else \
        [n for i, n in enumerate(data.shape) if i not in axes]
    shape = _tile_shape(shape)
    sign = -1.0 if negate else 1.0
    out_dtype = dtype_name(dtype) if dtype is not None else data.dtype
    return compute("vector", "tensor_reduce", [data], shape, out_dtype,
                   lambda x: sign * fn.reduce(x, axis=axes).reshape(shape), mask=mask, attrs={"alu": name})


def tensor_tensor_scan(data0: View, data1: View, initial, op0, op1, reverse0=False, reverse1=False,
                       dtype=None, mask=None) -> Tensor:
    """Per partition along the free axis: ``r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i])``,
    ``r[:, -1]`` being ``initial`` (a number or a [P, 1] tile)."""
    name0, fn0 = binary(op0)
    name1, fn1 = binary(op1)
    if data0.shape != data1.shape:
        raise nki_error("err_num_partition_mismatch",
                        f"tensor_tensor_scan: operand shapes {list(data0.shape)} and {list(data1.shape)} differ")
    if data0.memory == "psum" and data1.memory == "psum":
        raise nki_error("err_unsupported_memory", "tensor_tensor_scan: at most one operand may be in PSUM")
    vi, ci = _scalar_operand(initial, "initial")

    def run(a, b, *tiles):
        p = a.shape[0]
        a2, b2 = a.reshape(p, -1), b.reshape(p, -1)
        prev = tiles[0].reshape(p) if tiles else np.full(p, ci)
        out = np.empty_like(a2)
        for i in range(a2.shape[1]):
            x = fn0(prev, a2[:, i]) if reverse0 else fn0(a2[:, i], prev)
            prev = fn1(b2[:, i], x) if reverse1 else fn1(x, b2[:, i])
            out[:, i] = prev
        return out.reshape(a.shape)

    out_dtype = dtype_name(dtype) if dtype is not None else promote(data0.dtype, data1.dtype)
    return compute("vector", "tensor_tensor_scan", [data0, data1], data0.shape, out_dtype, run,
                   operands=[vi] if vi is not None else [], n_inputs=2, flops_per_element=2, mask=mask,
                   attrs={"alu": f"{name0}+{name1}"})


def tensor_copy(src: View, dtype=None, mask=None, engine: str | None = None) -> Tensor:
    out_dtype = dtype_name(dtype) if dtype is not None else src.dtype
    return compute(_ENGINES[engine] or "vector", "tensor_copy", [src], src.shape, out_dtype, lambda x: x,
                   mask=mask, flops_per_element=0)


def reciprocal(data: View, dtype=None, mask=None) -> Tensor:
    out_dtype = dtype_name(dtype) if dtype is not None else data.dtype
    return compute("vector", "reciprocal", [data], data.shape, out_dtype, lambda x: 1.0 / x, mask=mask)


def bn_stats(data: View, dtype=None, mask=None) -> Tensor:
    """Per partition, statistics of up to 512 elements as 6 numbers: (count, mean, variance) of the
    even- and odd-indexed elements. Only ``bn_aggr`` reads them, so the layout is this simulator's
    own; what ``bn_aggr`` returns from them is the mean and (population) variance."""
    if data.free_size > BN_STATS_FMAX:
        raise nki_error("err_size_of_dimension_exceed_arch_limit",
                        f"bn_stats: free size {data.free_size} exceeds {BN_STATS_FMAX} (nl.tile_size.bn_stats_fmax); "
                        "split it and aggregate the pieces with bn_aggr")
    p = data.partitions

    def run(x):
        x = x.reshape(p, -1)
        if mask is not None:       # masked-off elements do not count
            keep = np.broadcast_to(np.asarray(mask, bool), data.shape).reshape(p, -1)
        else:
            keep = np.ones_like(x, bool)
        out = []
        for part in (slice(0, None, 2), slice(1, None, 2)):
            v, k = x[:, part], keep[:, part]
            n = k.sum(axis=1)
            mean = np.where(n > 0, np.where(k, v, 0).sum(axis=1) / np.maximum(n, 1), 0.0)
            var = np.where(n > 0, np.where(k, (v - mean[:, None]) ** 2, 0).sum(axis=1) / np.maximum(n, 1), 0.0)
            out += [n, mean, var]
        return np.stack(out, axis=1)

    out_dtype = dtype_name(dtype) if dtype is not None else "float32"
    return compute("vector", "bn_stats", [data], (p, 6), out_dtype, run, flops_per_element=3)


def bn_aggr(data: View, dtype=None, mask=None) -> Tensor:
    """Combine ``bn_stats`` groups (6 numbers each) into [mean, variance] per partition."""
    if data.free_size % 3:
        raise nki_error("err_size_of_dimension_exceed_arch_limit",
                        f"bn_aggr: input free size {data.free_size} is not a whole number of bn_stats groups")
    p = data.partitions

    def run(x):
        groups = x.reshape(p, -1, 3)
        n, mean, var = groups[..., 0], groups[..., 1], groups[..., 2]
        total = np.maximum(n.sum(axis=1), 1)
        mu = (n * mean).sum(axis=1) / total
        m2 = (n * (var + (mean - mu[:, None]) ** 2)).sum(axis=1) / total
        return np.stack([mu, m2], axis=1)

    out_dtype = dtype_name(dtype) if dtype is not None else "float32"
    return compute("vector", "bn_aggr", [data], (p, 2), out_dtype, run, flops_per_element=3)


def memset(shape, value, dtype, engine: str | None = None, into: View | None = None) -> Tensor | None:
    """Fill a new tile of ``shape`` (or the view ``into``) with ``value``."""
    tr = current()
    engine = _ENGINES[engine] or "vector"
    if into is None:
        out = tr.allocate(tuple(shape), dtype, "sbuf")
        view = out.full()
    else:
        out, view = None, into
    if engine == "gpsimd" and view.memory == "psum":
        raise nki_error("err_unsupported_memory", "memset: GpSimdE cannot access PSUM")
    index = tr.emit("compute", engine, [], [view], opcode="memset", free_size=view.free_size,
                    partitions=_partitions(view, "memset"), dtype=view.dtype, dst=view.memory, n_inputs=0,
                    value=float(value))
    if tr.values:
        view.write(np.full(view.shape, value, np.float32))
    return tr.produced(out, index) if out is not None else None


def iota(expr, dtype, mask=None) -> Tensor:
    """GpSimdE: a tile whose elements are an affine expression of their indices (``nl.arange`` grids)."""
    values = np.asarray(expr)
    shape = _tile_shape(list(values.shape))
    return compute("gpsimd", "iota", [], shape, dtype_name(dtype), lambda: values.reshape(shape), mask=mask,
                   flops_per_element=0)


def affine_select(pred, on_true: View, on_false_value, dtype=None, mask=None) -> Tensor:
    """GpSimdE: ``on_true`` where the affine predicate of the indices holds, else ``on_false_value``."""
    keep = np.asarray(pred, bool)
    out_dtype = dtype_name(dtype) if dtype is not None else on_true.dtype
    return compute("gpsimd", "affine_select", [on_true], on_true.shape, out_dtype,
                   lambda x: np.where(np.broadcast_to(keep, x.shape), x, on_false_value), mask=mask)


def op_label(op) -> str:
    return op_name(op)
