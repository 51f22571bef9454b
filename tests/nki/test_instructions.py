"""Each nisa instruction: its numpy values against a reference, and its cost in engine cycles as
the NKI ISA states it (``max(MIN_II, N)`` + the 60-cycle access overhead, at the engine's clock)."""
import numpy as np
import pytest

import backend.nki.isa as nisa
import backend.nki.language as nl
from backend.nki.dtypes import quantize
from backend.sim.costs import instruction_ns

from nki_helpers import TRN2, cycles_ns, instructions, run

MIN_II, ACCESS = TRN2.min_ii_cycles, TRN2.access_overhead_cycles


def _one(fn, *arrays):
    """Run ``fn`` as the body of a kernel over [128, F] tiles loaded from ``arrays``; store its result."""
    def kernel(*hbm):
        tiles = [nl.load(t) for t in hbm]
        res = fn(*tiles)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    return run(kernel, *arrays)


def _cost(result, engine, opcode):
    (ins,) = instructions(result, engine, opcode)
    return instruction_ns(ins, TRN2), ins


def test_tensor_tensor_values_and_cycles(rng):
    a, b = rng.standard_normal((2, 128, 512)).astype(np.float32)
    result = _one(lambda x, y: nisa.tensor_tensor(x, y, op=nl.multiply), a, b)
    np.testing.assert_array_equal(result.outputs[0], a * b)
    ns, ins = _cost(result, "vector", "tensor_tensor")
    assert ins.attr("alu") == "multiply" and ins.free_size == 512
    assert ns == pytest.approx(cycles_ns(2 * 512 + ACCESS, "vector"))      # fp32 from SBUF: 2N


def test_tensor_tensor_bf16_add_is_one_cycle_per_element(rng):
    a, b = rng.standard_normal((2, 128, 512)).astype(np.float32)
    def body(x, y):
        return nisa.tensor_tensor(nl.copy(x, dtype=nl.bfloat16), nl.copy(y, dtype=nl.bfloat16), op=np.add)
    result = _one(body, a, b)
    np.testing.assert_array_equal(result.outputs[0], quantize(quantize(a, "bfloat16") + quantize(b, "bfloat16"),
                                                              "bfloat16"))
    ns, _ = _cost(result, "vector", "tensor_tensor")
    assert ns == pytest.approx(cycles_ns(512 + ACCESS, "vector"))


def test_tensor_scalar_two_ops_with_a_partition_operand(rng):
    x = rng.standard_normal((128, 256)).astype(np.float32)
    s = rng.standard_normal((128, 1)).astype(np.float32)
    result = _one(lambda t, c: nisa.tensor_scalar(t, op0=np.subtract, operand0=c, op1=np.multiply, operand1=3.0),
                  x, s)
    np.testing.assert_allclose(result.outputs[0], (x - s) * 3.0, rtol=1e-6)
    ns, _ = _cost(result, "vector", "tensor_scalar")
    assert ns == pytest.approx(cycles_ns(max(MIN_II, 256 / TRN2.vector_rate_4byte) + ACCESS, "vector"))


def test_activation_fuses_scale_and_bias_on_scalar_engine(rng):
    x = rng.standard_normal((128, 300)).astype(np.float32)
    scale = rng.standard_normal((128, 1)).astype(np.float32)
    bias = rng.standard_normal((128, 1)).astype(np.float32)
    result = _one(lambda t, s, b: nisa.activation(op=nl.exp, data=t, scale=s, bias=b), x, scale, bias)
    np.testing.assert_allclose(result.outputs[0], np.exp(x * scale + bias), rtol=1e-5)
    ns, ins = _cost(result, "scalar", "activation")
    assert ins.attr("func") == "exp"
    assert ns == pytest.approx(cycles_ns(300 + ACCESS, "scalar"))


def test_tensor_reduce_along_the_free_axis(rng):
    x = rng.standard_normal((128, 4, 64)).astype(np.float32)
    result = _one(lambda t: nisa.tensor_reduce(np.max, t, axis=(1, 2)), x)
    np.testing.assert_array_equal(result.outputs[0], x.max(axis=(1, 2)).reshape(128, 1))
    ns, _ = _cost(result, "vector", "tensor_reduce")
    assert ns == pytest.approx(cycles_ns(256 + ACCESS, "vector"))


def test_tensor_tensor_scan_carries_along_the_free_axis(rng):
    a, b = rng.random((2, 128, 96)).astype(np.float32)
    result = _one(lambda x, y: nisa.tensor_tensor_scan(x, y, initial=0.5, op0=np.multiply, op1=np.add), a, b)
    expected, prev = np.empty_like(a), np.full(128, 0.5, np.float32)
    for i in range(96):
        prev = a[:, i] * prev + b[:, i]
        expected[:, i] = prev
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-5)
    ns, _ = _cost(result, "vector", "tensor_tensor_scan")
    assert ns == pytest.approx(cycles_ns(2 * 96 + ACCESS, "vector"))


def test_tensor_copy_casts_to_bf16(rng):
    x = rng.standard_normal((64, 512)).astype(np.float32)
    result = _one(lambda t: nisa.tensor_copy(t, dtype=nl.bfloat16), x)
    np.testing.assert_array_equal(result.outputs[0], quantize(x, "bfloat16"))
    assert not np.array_equal(result.outputs[0], x)          # bf16 really rounds
    (ins,) = instructions(result, "vector", "tensor_copy")
    assert ins.partitions == 64


def test_bn_stats_and_aggr_give_mean_and_variance(rng):
    x = rng.standard_normal((128, 1024)).astype(np.float32) * 3 + 1
    def body(t):
        stats = nl.ndarray((128, 12), dtype=nl.float32)
        for j in nl.affine_range(2):
            stats[:, j * 6:(j + 1) * 6] = nisa.bn_stats(t[:, j * 512:(j + 1) * 512])
        return nisa.bn_aggr(stats)
    result = _one(body, x)
    np.testing.assert_allclose(result.outputs[0][:, 0], x.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(result.outputs[0][:, 1], x.var(axis=1), rtol=1e-4)
    stats_ns = [instruction_ns(i, TRN2) for i in instructions(result, "vector", "bn_stats")]
    assert stats_ns == pytest.approx([cycles_ns(512 + ACCESS, "vector")] * 2)
    (aggr,) = instructions(result, "vector", "bn_aggr")
    assert instruction_ns(aggr, TRN2) == pytest.approx(cycles_ns(max(MIN_II, 13 * 12 / 3) + ACCESS, "vector"))


def test_nc_matmul_accumulates_in_fp32_psum(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    def body(x, y):
        xb, yb = nl.copy(x, dtype=nl.bfloat16), nl.copy(y, dtype=nl.bfloat16)
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        for _ in nl.affine_range(2):
            acc += nisa.nc_matmul(xb, yb)
        return nl.copy(acc)
    result = _one(body, a, b)
    qa, qb = quantize(a, "bfloat16"), quantize(b, "bfloat16")
    np.testing.assert_allclose(result.outputs[0], 2 * (qa.T @ qb), rtol=1e-5, atol=1e-4)
    mms = instructions(result, "tensor", "nc_matmul")
    assert len(mms) == 2 and not instructions(result, "vector", "memset")     # zeroing folded into the first
    # bf16: max(min(64, M), N) cycles; the access overhead counts at the assumption's share.
    assert mms[0].dtype == "bfloat16" and mms[0].stationary_free == 128 and mms[0].free_size == 512
    # The second accumulation follows the first on TensorE's in-order stream: no semaphore wait.
    assert instruction_ns(mms[1], TRN2) == instruction_ns(mms[0], TRN2) and mms[1].deps == ()


def test_fp32_matmul_runs_at_quarter_rate(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    r32 = _one(lambda x, y: nl.copy(nisa.nc_matmul(x, y)), a, b)
    r16 = _one(lambda x, y: nl.copy(nisa.nc_matmul(nl.copy(x, dtype=nl.bfloat16), nl.copy(y, dtype=nl.bfloat16))),
               a, b)
    np.testing.assert_allclose(r32.outputs[0], a.T @ b, rtol=1e-4, atol=1e-3)
    from backend.sim.costs.tensor import matmul_cycles
    (m32,), (m16,) = instructions(r32, "tensor"), instructions(r16, "tensor")
    assert matmul_cycles(128, 512, m32.dtype, TRN2) == 4 * matmul_cycles(128, 512, m16.dtype, TRN2) == 4 * 512


def test_nc_transpose_on_tensor_engine(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    result = _one(lambda t: nl.copy(nisa.nc_transpose(t)), x)
    np.testing.assert_array_equal(result.outputs[0], x.T)
    (ins,) = instructions(result, "tensor", "nc_transpose")
    assert (ins.partitions, ins.stationary_free, ins.free_size) == (128, 64, 128)


def test_memset_iota_and_affine_select():
    def kernel():
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        ones = nisa.memset((128, 128), 1.0, nl.float32)
        lower = nisa.affine_select(i_p - i_f >= 0, ones, 0.0)
        idx = nisa.iota(i_p * 128 + i_f, dtype=nl.int32)
        out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=lower)
        nl.store(out[1], value=nl.copy(idx, dtype=nl.float32))
        return out
    result = run(kernel)
    out = result.outputs[0]
    np.testing.assert_array_equal(out[0], np.tril(np.ones((128, 128))))
    np.testing.assert_array_equal(out[1], np.arange(128 * 128).reshape(128, 128))
    for opcode in ("iota", "affine_select"):
        (ins,) = instructions(result, "gpsimd", opcode)
        assert instruction_ns(ins, TRN2) == pytest.approx(cycles_ns(150 + 128 + ACCESS, "gpsimd"))
    (ms,) = instructions(result, "vector", "memset")
    assert ms.attr("value") == 1.0


def test_dma_copy_descriptors_follow_contiguous_rows(rng):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    def kernel(t):
        tile = nl.ndarray((128, 32), dtype=nl.float32)
        nisa.dma_copy(dst=tile, src=t[0:128, 16:48])             # 128 B runs
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out
    result = run(kernel, x)
    np.testing.assert_array_equal(result.outputs[0], x[0:128, 16:48])
    load, store = instructions(result, "dma")
    assert (load.nbytes, load.descriptors, load.dma_engines) == (128 * 32 * 4, 128, 16)
    assert load.traffic == {"hbm_read_bytes": 16384, "sbuf_write_bytes": 16384}
    assert store.deps == (0,)


def test_reciprocal_costs_eight_cycles_per_element(rng):
    x = rng.random((128, 100)).astype(np.float32) + 0.5
    result = _one(lambda t: nl.reciprocal(t), x)
    np.testing.assert_allclose(result.outputs[0], 1 / x, rtol=1e-6)
    ns, _ = _cost(result, "vector", "reciprocal")
    assert ns == pytest.approx(cycles_ns(800 + ACCESS, "vector"))
