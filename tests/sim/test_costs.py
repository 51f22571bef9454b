"""Exact numbers for each cost formula (engine cycles / clock)."""
import pytest

from backend.sim.costs import cost, instruction_ns, registered_costs
from backend.sim.ir import Instruction
from backend.sim.presets import derive, get_target

TRN1, TRN2, TRN3 = get_target("trn1"), get_target("trn2"), get_target("trn3")


def ns(target, **kw):
    return instruction_ns(Instruction(**kw), target)


def test_matmul_bf16_fp32_and_small_moving():
    # max(min(64, 128), 512) = 512 cycles + 60 static access overhead, at 2.8 GHz
    assert ns(TRN1, engine="tensor", opcode="nc_matmul", free_size=512, stationary_free=128,
              dtype="bfloat16") == pytest.approx(572 / 2.8)
    # fp32 runs at quarter rate
    assert ns(TRN1, engine="tensor", opcode="nc_matmul", free_size=512, stationary_free=128,
              dtype="float32") == pytest.approx((4 * 512 + 60) / 2.8)
    # a short moving tile is bound by loading the stationary: min(64, 128) = 64
    assert ns(TRN2, engine="tensor", opcode="nc_matmul", free_size=32, stationary_free=128,
              dtype="bfloat16") == pytest.approx((64 + 60) / 2.4)
    assert ns(TRN2, engine="tensor", opcode="nc_matmul", free_size=8, stationary_free=16,
              dtype="bfloat16") == pytest.approx((16 + 60) / 2.4)
    # fp8 doubles throughput on NC-v3
    assert ns(TRN2, engine="tensor", opcode="nc_matmul", free_size=512, stationary_free=128,
              dtype="float8_e4m3fn") == pytest.approx((256 + 60) / 2.4)


def test_tensor_tensor_one_or_two_cycles_per_element():
    def tt(dtype, **attrs):
        return ns(TRN1, engine="vector", opcode="tensor_tensor", free_size=1000, dtype=dtype, attrs=attrs)
    assert tt("bfloat16", alu="add") == pytest.approx((1000 + 60) / 1.12)
    assert tt("bfloat16", alu="divide") == pytest.approx((2000 + 60) / 1.12)
    assert tt("float32", alu="add") == pytest.approx((2000 + 60) / 1.12)
    assert tt("float32", alu="add", psum_input=True) == pytest.approx((1000 + 60) / 1.12)


def test_vector_streaming_rates_per_generation():
    # NC-v2: one element per partition per cycle; NC-v3: 4 (2-byte) or 2 (4-byte)
    assert ns(TRN1, engine="vector", opcode="tensor_scalar", free_size=1024, dtype="bfloat16") == pytest.approx(1084 / 1.12)
    assert ns(TRN2, engine="vector", opcode="tensor_scalar", free_size=1024, dtype="bfloat16") == pytest.approx(316 / 0.96)
    assert ns(TRN2, engine="vector", opcode="tensor_copy", free_size=1024, dtype="float32") == pytest.approx(572 / 0.96)
    # MIN_II floor for small tiles
    assert ns(TRN1, engine="vector", opcode="tensor_scalar", free_size=10, dtype="float32") == pytest.approx(124 / 1.12)


def test_reduce_reciprocal_bn_memset():
    assert ns(TRN1, engine="vector", opcode="tensor_reduce", free_size=1000, dtype="bfloat16",
              attrs={"alu": "max"}) == pytest.approx(560 / 1.12)
    assert ns(TRN1, engine="vector", opcode="tensor_reduce", free_size=1000, dtype="float32") == pytest.approx(1060 / 1.12)
    assert ns(TRN1, engine="vector", opcode="reciprocal", free_size=100) == pytest.approx(860 / 1.12)
    assert ns(TRN1, engine="vector", opcode="bn_stats", free_size=512) == pytest.approx(572 / 1.12)
    assert ns(TRN1, engine="vector", opcode="bn_aggr", free_size=30) == pytest.approx(190 / 1.12)
    assert ns(TRN1, engine="vector", opcode="memset", free_size=1000, dtype="bfloat16") == pytest.approx(560 / 1.12)
    assert ns(TRN1, engine="vector", opcode="memset", free_size=1000, dtype="float32") == pytest.approx(1060 / 1.12)


def test_scalar_and_gpsimd():
    assert ns(TRN1, engine="scalar", opcode="activation", free_size=512, dtype="float32") == pytest.approx(572 / 1.4)
    # NC-v4 ScalarE streams 2 bf16 elements per partition per cycle
    assert ns(TRN3, engine="scalar", opcode="activation", free_size=1024, dtype="bfloat16") == pytest.approx(572 / 1.2)
    # iota / affine_select: 150 + N
    assert ns(TRN1, engine="gpsimd", opcode="iota", free_size=100) == pytest.approx(310 / 1.4)
    assert ns(TRN2, engine="gpsimd", opcode="affine_select", free_size=1000) == pytest.approx(1210 / 1.2)


def test_strided_access_halves_bandwidth():
    plain = ns(TRN1, engine="vector", opcode="tensor_copy", free_size=512)
    strided = ns(TRN1, engine="vector", opcode="tensor_copy", free_size=512, attrs={"strided": True})
    assert plain == pytest.approx(572 / 1.12) and strided == pytest.approx(1084 / 1.12)


def test_dma_engine_time():
    # 32 KiB on one engine in 4 rows of 8 KiB: bytes at the engine's slice of trn2's HBM share
    # (362.5 / 16 = 22.66 B/ns, under its 23 B/ns: all 16 engines at once never beat HBM) + one
    # 256 B slot per descriptor
    got = ns(TRN2, engine="dma", opcode="dma_copy", nbytes=32768, descriptors=4, dma_engines=1, src="hbm", dst="sbuf")
    assert got == pytest.approx(32768 / (362.5 / 16) + 4 * 256 / 23)
    # trn1's slice (410 / 16 = 25.6 B/ns) is above its engines' 17 B/ns: no cap
    got = ns(TRN1, engine="dma", opcode="dma_copy", nbytes=32768, descriptors=4, dma_engines=1, src="hbm", dst="sbuf")
    assert got == pytest.approx((32768 + 4 * 256) / 17)
    # an HBM-to-HBM copy crosses HBM twice per byte: half the slice per engine
    got = ns(TRN1, engine="dma", opcode="dma_copy", nbytes=16 * 65536, descriptors=16, dma_engines=16,
             src="hbm", dst="hbm")
    assert got == pytest.approx(65536 / (410 / 32) + 256 / 17)
    # spread over 16 engines, trn2's HBM share (362.5 GB/s) caps each engine below 23 B/ns
    got = ns(TRN2, engine="dma", opcode="dma_copy", nbytes=16 * 65536, descriptors=16, dma_engines=16,
             src="hbm", dst="sbuf")
    assert got == pytest.approx(65536 / (362.5 / 16) + 256 / 23)
    # sub-256 B rows are overhead-bound: 64 B rows cost 5x the bytes alone
    small = ns(TRN1, engine="dma", opcode="dma_copy", nbytes=64 * 128, descriptors=128, dma_engines=1,
               src="hbm", dst="sbuf")
    assert small == pytest.approx((64 * 128 + 128 * 256) / 17)
    # the host link is shared by the engines of a transfer
    host = ns(TRN2, engine="dma", opcode="dma_copy", nbytes=160_000, descriptors=16, dma_engines=16,
              src="host", dst="hbm")
    assert host == pytest.approx(10_000 / (25 / 16) + 256 / 23)


def test_explicit_duration_and_host():
    assert ns(TRN2, engine="host", opcode="anything", duration_ns=123.0) == 123.0
    t = derive("trn2", host_flops_per_s=1e9, host_bytes_per_s=1e9)
    assert ns(t, engine="host", opcode="host_compute", flops=2000, nbytes=100) == pytest.approx(2000)
    assert ns(t, engine="host", opcode="host_compute", flops=10, nbytes=5000) == pytest.approx(5000)


def test_registry_rejects_duplicates_and_unknown():
    assert ("tensor", "nc_matmul") in registered_costs()
    with pytest.raises(ValueError, match="duplicate"):
        cost("vector", "tensor_tensor")(lambda i, t: 0.0)
    with pytest.raises(KeyError, match="no cost formula"):
        ns(TRN2, engine="vector", opcode="warp_shuffle")
