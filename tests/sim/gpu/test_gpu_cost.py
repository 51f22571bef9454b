"""Exact numbers of the GPU cost formulas on a config with round numbers (see gpu_records)."""
from __future__ import annotations

import pytest

from backend.sim.gpu import (GemmShape, a100, derive, gemm_cost, h100, hbm_time_ns, matmul_unit,
                             plan_gemm, stream_cost, transfer_ns, vector_compute_ns)
from gpu_records import ROUND

ITER_NS = 2 * 128 * 128 * 64 / 500      # one 128x128x64 K step at 500 FLOP/ns per SM
RAMP_NS = 100.0                          # 100 cycles at 1 GHz


def test_launch_only_kernel_costs_the_launch_overhead():
    cost = stream_cost(ROUND, flops=0, dtype="float32", read_bytes=0, write_bytes=0,
                       launch_ns=ROUND.launch_overhead_ns)
    assert cost.total_ns == 1000.0
    assert cost.bound == "launch"


def test_memory_bound_copy():
    cost = stream_cost(ROUND, 0, "float32", 1_000_000, 1_000_000, 1000.0)
    # launch + latency + 2 MB at 500 B/ns
    assert cost.total_ns == pytest.approx(1000 + 100 + 4000)
    assert cost.bound == "memory"


def test_large_stream_approaches_but_never_reaches_the_efficiency_ceiling():
    big = 2**34
    bandwidth = big / hbm_time_ns(h100, big) * 1e9
    assert 0.899 * h100.hbm_bytes_per_s < bandwidth < 0.9 * h100.hbm_bytes_per_s
    small = 2**16
    assert small / hbm_time_ns(h100, small) * 1e9 < 0.1 * h100.hbm_bytes_per_s


def test_compute_bound_gemm_uses_split_k_to_fill_the_sms():
    # one 128x128 output tile, K = 1024 -> 16 K steps; 4 SMs allow split-K 4 (4 steps each)
    cost = gemm_cost(ROUND, GemmShape(128, 128, 1024), "bfloat16", launch_ns=1000.0)
    assert cost.plan.split_k == 4 and cost.plan.waves == 1 and cost.plan.iters_per_cta == 4
    # then the 4 fp32 partials (4 x 64 KiB, in L2) are written and read back: 50 ns + 512 KiB / 4,000 B/ns
    reduce_ns = 50 + 2 * 4 * 128 * 128 * 4 / 4000
    assert cost.tensor_ns == pytest.approx(RAMP_NS + 4 * ITER_NS + reduce_ns)
    assert cost.total_ns == pytest.approx(1000 + 100 + 4 * ITER_NS + reduce_ns)
    # A and B read, C written; fp32 partials (256 KiB) stay in the 1 MiB L2
    assert (cost.hbm_read_bytes, cost.hbm_write_bytes) == (2 * 128 * 1024 * 2, 128 * 128 * 2)
    assert cost.bound == "compute"


def test_split_k_partials_spill_to_hbm_when_l2_is_too_small():
    cost = gemm_cost(derive(ROUND, l2_bytes=1024), GemmShape(128, 128, 1024), "bfloat16", 0.0)
    partials = 4 * 128 * 128 * 4
    assert cost.plan.extra_hbm_bytes == 2 * partials
    assert cost.hbm_read_bytes == 2 * 128 * 1024 * 2 + partials
    assert cost.memory_ns == pytest.approx(100 + (2 * 128 * 1024 * 2 + 128 * 128 * 2 + 2 * partials) / 500)


@pytest.mark.parametrize("n, waves", [(256, 1), (384, 2), (512, 2), (640, 3)])
def test_wave_quantisation(n, waves):
    # M = 256 -> 2 row tiles; N / 128 column tiles; 4 SMs; K = 64 is one step (no split-K)
    plan = plan_gemm(ROUND, GemmShape(256, n, 64), 4e12, itemsize=2, hbm_bytes=0)
    assert plan.waves == waves and plan.split_k == 1
    assert plan.compute_ns == pytest.approx(waves * (RAMP_NS + ITER_NS))
    assert plan.wave_efficiency == pytest.approx(2 * n / 128 / (4 * waves))


def test_padding_and_narrow_tiles():
    def compute(m):
        return plan_gemm(ROUND, GemmShape(m, 128, 64), 4e12, 2, 0).compute_ns

    assert compute(129) == compute(256)                      # M padded to two 128-row tiles
    assert compute(64) == pytest.approx(RAMP_NS + ITER_NS / 2)   # a 64-row tile for M <= 64
    assert compute(1) == compute(64)


def test_k_loop_ramp_is_paid_once_per_wave():
    one_step = plan_gemm(ROUND, GemmShape(512, 128, 64), 4e12, 2, 0)
    many_steps = plan_gemm(ROUND, GemmShape(512, 128, 64 * 10), 4e12, 2, 0)
    assert many_steps.compute_ns - one_step.compute_ns == pytest.approx(9 * ITER_NS)


def test_matmul_unit_by_dtype():
    assert matmul_unit(h100, "bfloat16") == ("tensor_core", 989e12)
    assert matmul_unit(h100, "float16") == ("tensor_core", 989e12)
    assert matmul_unit(h100, "float8_e4m3fn") == ("tensor_core", 1979e12)
    assert matmul_unit(a100, "float8_e4m3fn") == ("tensor_core", 312e12)   # no fp8 cores
    # PyTorch's default keeps fp32 matmuls in full fp32 on CUDA cores
    assert matmul_unit(h100, "float32") == ("cuda_core", 67e12)
    assert matmul_unit(derive(h100, allow_tf32=True), "float32") == ("tensor_core", 494.7e12)
    assert matmul_unit(h100, "float64") == ("cuda_core", 34e12)


def test_cuda_core_and_pcie_times():
    assert vector_compute_ns(ROUND, 1_000_000, "float32") == pytest.approx(2000.0)
    assert transfer_ns(ROUND, 1_000_000) == pytest.approx(1_000_000.0)
    assert transfer_ns(h100, 64_000_000) == pytest.approx(1_000_000.0)    # 64 GB/s gen5 x16
    assert transfer_ns(a100, 32_000_000) == pytest.approx(1_000_000.0)    # 32 GB/s gen4 x16


def test_fp32_gemm_is_slower_than_bf16_unless_tf32_allowed():
    shape = GemmShape(4096, 4096, 4096)
    fp32 = gemm_cost(h100, shape, "float32", 0.0)
    tf32 = gemm_cost(derive(h100, allow_tf32=True), shape, "float32", 0.0)
    bf16 = gemm_cost(h100, shape, "bfloat16", 0.0)
    assert fp32.cuda_ns > 0 and fp32.tensor_ns == 0
    assert bf16.total_ns < tf32.total_ns < fp32.total_ns


@pytest.mark.parametrize("config", [a100, h100])
def test_large_bf16_gemm_lands_just_under_the_measured_mamf_ceiling(config):
    # the ceiling is the MAMF best-shape fraction (presets.py); a large square GEMM loses little
    shape = GemmShape(8192, 8192, 8192)
    cost = gemm_cost(config, shape, "bfloat16", config.launch_overhead_ns)
    fraction = shape.flops / cost.total_ns * 1e9 / config.bf16_tensor_flops_per_s
    assert 0.95 * config.max_compute_efficiency < fraction < config.max_compute_efficiency
