"""Splash attention on the TPU model: which score blocks run, the per-block MXU padding, the
backward's recomputed scores and the VPU softmax, pinned on inputs small enough to count by hand."""
from __future__ import annotations

import pytest

from backend.sim.presets import derive
from backend.sim.tpu import mxu_padded_flops, record_cost, v5e, v6e
from backend.sim.tpu.attention import attention_work, score_blocks, softmax_flops_per_score
from tests.sim.tpu.tpu_records import ROUND, T, rec

FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"
BACKWARD = FORWARD + "_backward"


def _forward(heads: int, seq: int, head_dim: int, causal: bool = True):
    q = T(1, heads, seq, head_dim)
    return rec(FORWARD, [q, q, q], [q, T(1, heads, seq)], attrs={"is_causal": causal})


def _backward(heads: int, seq: int, head_dim: int):
    q = T(1, heads, seq, head_dim)
    return rec(BACKWARD, [q, q, q, q, q, T(1, heads, seq)], [q, q, q], attrs={"is_causal": True})


def test_causal_grid_skips_blocks_above_the_diagonal_and_masks_the_ones_it_crosses():
    assert score_blocks(8, 8, 4, 4, causal=True) == [(4, 4, True), (4, 4, False), (4, 4, True)]
    assert score_blocks(8, 8, 4, 4, causal=False) == [(4, 4, False)] * 4
    # uneven blocks are clipped to the sequence end; a block the diagonal only touches is unmasked
    assert score_blocks(6, 6, 4, 2, causal=True) == [(4, 2, True), (4, 2, True), (2, 2, False), (2, 2, False),
                                                     (2, 2, True)]
    assert score_blocks(8, 8, 8, 8, causal=True) == [(8, 8, True)]      # one block: run whole


def test_softmax_counts_use_the_shared_elementwise_table():
    assert softmax_flops_per_score(("maximum", "sub", "exp", "add")) == 7     # exp is 4
    assert softmax_flops_per_score(("sub", "exp", "sub", "mul")) == 7


def test_forward_costs_the_run_blocks_products_and_softmax_exactly():
    cfg = derive(ROUND, name="round4", attention_block_q=4, attention_block_kv=4)
    cost = record_cost(cfg, _forward(heads=2, seq=8, head_dim=4))
    # each 4x4x4 product pads K to 128 and one free dim to 128: 2 * 128 * (8 * 128) = 262,144;
    # QK^T and PV on 3 run blocks of 2 heads
    assert cost.padded_flops == 2 * 3 * 2 * 262_144
    assert cost.mxu_ns == pytest.approx(3_145_728 / 500)
    # 7 VPU FLOPs per score, +1 (where) on the two masked blocks: 2 heads x (16*8 + 16*7 + 16*8)
    assert cost.vpu_ns == pytest.approx(736 / 1000)
    assert cost.total_ns == pytest.approx(100 + 3_145_728 / 500 + 0.736)
    assert cost.flops == 2 * (4 * 8 * 8 * 4)        # the shared GEMM-equivalent count is kept


def test_backward_recomputes_scores_once_fused_and_in_each_of_two_kernels_otherwise():
    record = _backward(heads=2, seq=8, head_dim=4)
    split = derive(ROUND, name="split", attention_block_q_bwd=4, attention_block_kv_bwd=4)
    fused = derive(split, name="fused", attention_fused_backward=True)
    pad = lambda shape: mxu_padded_flops(ROUND, shape)           # noqa: E731
    # every product here is 4x4x4 (262,144 issued); 3 run blocks x 2 heads
    assert attention_work(record, fused, pad) == (5 * 6 * 262_144, 368 * 2)         # qk dp dv dk dq
    assert attention_work(record, split, pad) == (7 * 6 * 262_144, 2 * 368 * 2)     # + qk dp again


def test_head_dim_128_wastes_half_of_v6e_mxu_on_qk_but_not_of_v5e():
    record = _forward(heads=1, seq=512, head_dim=128, causal=False)
    flops = 4 * 512 * 512 * 128
    v6 = attention_work(record, v6e, lambda s: mxu_padded_flops(v6e, s))[0]
    v5 = attention_work(record, v5e, lambda s: mxu_padded_flops(v5e, s))[0]
    assert (v6, v5) == (flops * 3 // 2, flops)       # QK^T contracts over 128 -> padded to 256 on v6e


def test_causal_attention_runs_fewer_blocks_than_full_attention():
    causal, full = (record_cost(v6e, _forward(4, 4096, 128, c)) for c in (True, False))
    assert causal.padded_flops == full.padded_flops * 36 // 64      # 512-blocks: 36 of 64 run
    assert causal.mxu_ns < full.mxu_ns and causal.vpu_ns < full.vpu_ns


def test_softmax_hides_under_the_mxu_by_the_exposed_share_and_never_more_than_the_mxu_time():
    record = _forward(heads=2, seq=8, head_dim=4)
    half = derive(ROUND, name="half", attention_block_q=4, attention_block_kv=4, attention_softmax_exposed=0.5)
    assert record_cost(half, record).vpu_ns == pytest.approx(0.736 / 2)
    fast_mxu = derive(half, name="fast", bf16_flops_per_s=1e18)       # MXU time 3,145,728 / 5e8 ns
    assert record_cost(fast_mxu, record).vpu_ns == pytest.approx(0.736 - 3_145_728 / 5e8)
    with pytest.raises(ValueError, match="attention_softmax_exposed is a fraction"):
        derive(ROUND, attention_softmax_exposed=1.5)
