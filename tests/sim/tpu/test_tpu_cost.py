"""Exact numbers of the TPU cost formulas on a config with round numbers (see tpu_records)."""
from __future__ import annotations

import pytest

from backend.sim.gpu import GemmShape
from backend.sim.presets import derive
from backend.sim.tpu import (fused_cost, hbm_ns, mxu_padded_flops, mxu_rate, record_cost, transfer_ns,
                             v5e, v6e, vpu_ns)
from tpu_records import ROUND, T, rec


def test_a_100x100_matmul_pays_for_128x128_tiles():
    cost = record_cost(ROUND, rec("aten::mm", [T(100, 100), T(100, 100)], [T(100, 100)]))
    # K and the stationary dim pad to 128, the streamed rows to 8 sublanes: 2 x 128 x 104 x 128
    assert cost.padded_flops == 2 * 128 * 104 * 128 == 3_407_872
    assert cost.flops == cost.mxu_flops == 2 * 100 ** 3
    assert cost.mxu_ns == pytest.approx(3_407_872 / 500)
    # A and B read, C written, at 500 B/ns
    assert (cost.hbm_read_bytes, cost.hbm_write_bytes) == (40_000, 20_000)
    assert cost.memory_ns == pytest.approx(60_000 / 500)
    assert cost.total_ns == pytest.approx(100 + 3_407_872 / 500)
    assert cost.bound == "compute"


def test_a_256_wide_mxu_pads_the_same_matmul_to_256():
    wide = derive(ROUND, mxu_size=256)
    assert mxu_padded_flops(wide, GemmShape(100, 100, 100)) == 2 * 256 * 104 * 256


@pytest.mark.parametrize("m, n, k, padded_free", [
    (8, 128, 128, 8 * 128),          # exact fit: no padding
    (1, 128, 128, 8 * 128),          # one row pads to a sublane group of 8
    (300, 8, 128, 384 * 8),          # the cheaper orientation: N streams, M is stationary
    (129, 129, 129, 136 * 256),
])
def test_padding_picks_the_cheaper_orientation(m, n, k, padded_free):
    k_pad = -(-k // 128) * 128
    assert mxu_padded_flops(ROUND, GemmShape(m, n, k)) == 2 * k_pad * padded_free


def test_batched_products_pad_each_matrix():
    assert mxu_padded_flops(ROUND, GemmShape(100, 100, 100, batch=3)) == 3 * 3_407_872


def test_mxu_rate_by_dtype():
    assert mxu_rate(ROUND, "bfloat16") == mxu_rate(ROUND, "float16") == 1e12
    assert mxu_rate(ROUND, "int8") == 2e12
    assert mxu_rate(ROUND, "float32") == pytest.approx(1e12 / 6)
    assert mxu_rate(v6e, "float8_e4m3fn") == v6e.bf16_flops_per_s


def test_fp32_matmul_takes_six_bf16_passes():
    bf16 = record_cost(ROUND, rec("aten::mm", [T(128, 128), T(128, 128)], [T(128, 128)]))
    fp32 = record_cost(ROUND, rec("aten::mm", [T(128, 128, dtype="float32"), T(128, 128, dtype="float32")],
                                  [T(128, 128, dtype="float32")]))
    assert fp32.mxu_ns == pytest.approx(6 * bf16.mxu_ns)


def test_elementwise_op_runs_at_the_vpu_rate():
    fast_hbm = derive(ROUND, hbm_bytes_per_s=1e15)
    cost = record_cost(fast_hbm, rec("aten::exp", [T(1000, 1000, dtype="float32")],
                                     [T(1000, 1000, dtype="float32")]))
    # exp counts 4 FLOPs per element: 4e6 FLOPs at 1,000 FLOP/ns
    assert cost.vpu_ns == pytest.approx(4000.0) == vpu_ns(fast_hbm, 4_000_000)
    assert cost.mxu_ns == 0 and cost.padded_flops == 0
    assert cost.total_ns == pytest.approx(100 + 4000)
    assert cost.bound == "compute"


def test_memory_bound_op_streams_at_the_hbm_rate():
    cost = record_cost(ROUND, rec("aten::add", [T(1000, 1000, dtype="float32"), T(1000, 1000, dtype="float32")],
                                  [T(1000, 1000, dtype="float32")]))
    # 1e6 FLOPs take 1,000 ns on the VPU; 12 MB at 500 B/ns take 24,000 ns
    assert cost.vpu_ns == pytest.approx(1000.0)
    assert cost.memory_ns == pytest.approx(24_000.0) == hbm_ns(ROUND, 12_000_000)
    assert cost.total_ns == pytest.approx(100 + 24_000)
    assert cost.bound == "memory"


def test_fusion_overhead_alone():
    cost = fused_cost(ROUND, [])
    assert cost.total_ns == 100.0 and cost.bound == "overhead"


def test_fused_intermediates_save_a_write_and_a_read():
    mul = rec("aten::mul", [T(1000, dtype="float32"), T(1000, dtype="float32")], [T(1000, dtype="float32")])
    add = rec("aten::add", [T(1000, dtype="float32"), T(1000, dtype="float32")], [T(1000, dtype="float32")])
    alone = fused_cost(ROUND, [mul, add])
    fused = fused_cost(ROUND, [mul, add], internal_bytes_saved=8000)
    assert (alone.hbm_read_bytes, alone.hbm_write_bytes) == (16_000, 8000)
    assert (fused.hbm_read_bytes, fused.hbm_write_bytes) == (12_000, 4000)
    assert fused.vpu_ns == pytest.approx(2.0)


def test_host_link_transfer():
    assert transfer_ns(ROUND, 1000) == pytest.approx(1000.0)


def test_4096_cube_matmul_on_the_stock_chips():
    mm = rec("aten::mm", [T(4096, 4096), T(4096, 4096)], [T(4096, 4096)])
    flops = 2 * 4096 ** 3
    for chip in (v5e, v6e):
        cost = record_cost(chip, mm)
        assert cost.padded_flops == flops           # 4096 is a multiple of 128 and 256: no padding
        assert cost.mxu_ns == pytest.approx(flops / (chip.bf16_flops_per_s * chip.max_mxu_efficiency) * 1e9)
        assert cost.total_ns == pytest.approx(chip.fusion_overhead_ns + cost.mxu_ns)
        assert cost.bound == "compute"


def test_fused_adamw_writes_params_and_both_moments():
    # 2 params of [4, 8] and [8] fp32: 160 bytes per list; reads p, g, m, v, writes p, m, v
    params = [T(4, 8, dtype="float32"), T(8, dtype="float32")]
    record = rec("aten::_fused_adamw_", params * 4 + [T(dtype="float32")] * 2, [],
                 attrs={"lr": 1e-3, "amsgrad": False})
    cost = record_cost(ROUND, record)
    assert (cost.hbm_read_bytes, cost.hbm_write_bytes) == (640, 480)
    assert cost.memory_ns == pytest.approx(1120 / 500)


def test_foreach_add_list_overload_writes_self():
    params = [T(4, 8, dtype="float32"), T(8, dtype="float32")]
    cost = record_cost(ROUND, rec("aten::_foreach_add_", params * 2, []))
    assert (cost.hbm_read_bytes, cost.hbm_write_bytes) == (320, 160)
