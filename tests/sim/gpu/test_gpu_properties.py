"""Properties of the GPU cost model over random shapes, dtypes and presets."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.sim.gpu import (PRESETS, GemmShape, derive, fused_cost, gemm_cost, hbm_time_ns,
                             matmul_unit, record_cost)
from gpu_records import T, rec

CONFIGS = [*PRESETS.values(), derive("h100", allow_tf32=True)]
configs = st.sampled_from(CONFIGS)
dtypes = st.sampled_from(["bfloat16", "float16", "float32", "float8_e4m3fn", "float64"])
dims = st.integers(1, 20_000)
shapes = st.builds(GemmShape, dims, dims, dims, st.integers(1, 16))


@settings(max_examples=150, deadline=None)
@given(configs, shapes, dtypes)
def test_predicted_rate_never_exceeds_the_sustained_peak(config, shape, dtype):
    cost = gemm_cost(config, shape, dtype, launch_ns=0.0)
    _, peak = matmul_unit(config, dtype)
    assert shape.flops / cost.compute_ns * 1e9 <= peak * config.max_compute_efficiency * (1 + 1e-9)
    assert shape.flops / cost.total_ns * 1e9 <= peak
    assert 0 < cost.plan.wave_efficiency <= 1


@settings(max_examples=150, deadline=None)
@given(configs, shapes, dtypes, st.sampled_from(["m", "n", "k", "batch"]), st.integers(1, 5000))
def test_gemm_time_never_drops_when_a_dimension_grows(config, shape, dtype, dim, grow):
    bigger = GemmShape(**{**{d: getattr(shape, d) for d in ("m", "n", "k", "batch")},
                          dim: getattr(shape, dim) + grow})
    assert (gemm_cost(config, bigger, dtype, 0.0).total_ns
            >= gemm_cost(config, shape, dtype, 0.0).total_ns * (1 - 1e-12))


@given(configs, st.integers(1, 2**40), st.integers(0, 2**40))
def test_hbm_time_grows_with_bytes_and_stays_under_peak(config, nbytes, more):
    t = hbm_time_ns(config, nbytes)
    assert hbm_time_ns(config, nbytes + more) >= t
    assert nbytes / t * 1e9 < config.max_hbm_efficiency * config.hbm_bytes_per_s


@settings(max_examples=60, deadline=None)
@given(configs, st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096))
def test_fusing_never_costs_more_than_running_eagerly(config, m, n, k):
    mm = rec("aten::mm", [T(m, k), T(k, n)], [T(m, n)])
    gelu = rec("aten::gelu", [T(m, n)], [T(m, n)])
    launch = config.launch_overhead_ns
    eager = record_cost(config, mm, launch).total_ns + record_cost(config, gelu, launch).total_ns
    assert fused_cost(config, [mm, gelu], launch).total_ns <= eager
    saved = fused_cost(config, [mm, gelu], launch, internal_bytes_saved=2 * m * n * 2)
    assert saved.total_ns <= fused_cost(config, [mm, gelu], launch).total_ns
