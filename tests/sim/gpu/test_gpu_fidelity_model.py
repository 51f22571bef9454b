"""What a GPU really does, pinned with exact numbers on ROUND (see gpu_records): asynchronous
launch, the tile heuristic (tiles, split-K, stream-K, L2 feed), L2-resident small kernels, and
efficiency read from the published MAMF measurements."""
from __future__ import annotations

import pytest

from backend.sim.gpu import (PRESETS, GemmShape, GpuSession, a100, derive, fused_cost, gemm_cost, gh200,
                             h100, plan_gemm, stream_cost)
from benchmarks.gpu_gemm import gpu_fidelity_rows
from gpu_records import ROUND, T, rec

LAUNCH = 1000.0                                          # ROUND.launch_overhead_ns
BIG = rec("aten::relu", [T(1000, 500, dtype="float32")], [T(1000, 500, dtype="float32")])
BIG_NS = 100 + 4_000_000 / 500                           # 4 MB from HBM: 8,100 ns > launch
SMALL = rec("aten::relu", [T(250, dtype="float32")], [T(250, dtype="float32")])
SMALL_NS = 50 + 2000 / 4000                              # 2 kB from L2: 50.5 ns < launch
ITER_NS = 2 * 128 * 128 * 64 / 500                       # one 128x128x64 K step on one SM


def stream(*records) -> GpuSession:
    session = GpuSession(ROUND)
    for r in records:
        session.feed(r)
    return session


# -- asynchronous launch ----------------------------------------------------------------------
def test_long_kernels_hide_the_launches_behind_them():
    trace = stream(BIG, BIG, BIG).trace
    # enqueued at 1,000 / 2,000 / 3,000 ns; each starts when the one before ends
    assert [op.end_ns for op in trace.ops] == pytest.approx([LAUNCH + BIG_NS * k for k in (1, 2, 3)])
    assert trace.total_time_ns == pytest.approx(LAUNCH + 3 * BIG_NS)       # not 3 x (1000 + 8100)
    tensor_starts = [e.start_ns for e in trace.events if e.engine == "hbm"]
    assert tensor_starts == pytest.approx([LAUNCH, LAUNCH + BIG_NS, LAUNCH + 2 * BIG_NS])


def test_short_kernels_are_launch_bound():
    trace = stream(SMALL, SMALL, SMALL).trace
    assert [op.end_ns for op in trace.ops] == pytest.approx([k * LAUNCH + SMALL_NS for k in (1, 2, 3)])
    # op spans run from the previous op's end, so they add up to the total
    assert sum(op.time_ns for op in trace.ops) == pytest.approx(trace.total_time_ns)


def test_mixed_stream_starts_each_kernel_at_max_of_launch_and_stream():
    small, big, small2 = stream(SMALL, BIG, SMALL).trace.ops
    assert small.end_ns == pytest.approx(LAUNCH + SMALL_NS)
    assert (big.start_ns, big.end_ns) == pytest.approx((LAUNCH + SMALL_NS, 2 * LAUNCH + BIG_NS))
    assert small2.end_ns == pytest.approx(2 * LAUNCH + BIG_NS + SMALL_NS)   # enqueued long before


def test_a_copy_to_the_host_drains_the_queue():
    item = rec("aten::_local_scalar_dense", [T(1, dtype="float32")], [T(1, dtype="float32")],
               transfer="d2h")
    big, copy, small = stream(BIG, item, SMALL).trace.ops
    copied = LAUNCH + BIG_NS + 4                           # 4 B at 1 GB/s after the queue drains
    assert copy.end_ns == pytest.approx(copied)
    # the host waited for the copy, so the next launch only begins then
    assert small.end_ns == pytest.approx(copied + LAUNCH + SMALL_NS)


def test_graph_replay_shortens_only_the_launch_path():
    session = GpuSession(ROUND, graph_replay=True)
    for r in (SMALL, SMALL):
        session.feed(r)
    assert session.trace.total_time_ns == pytest.approx(2 * 250 + SMALL_NS)


# -- tile choice ------------------------------------------------------------------------------
TWO_TILES = derive(ROUND, tile_shapes=((128, 128), (64, 64)))


@pytest.mark.parametrize("n, tile, time_ns", [
    (128, (64, 64), 2 * (100 + ITER_NS / 4)),       # 2 tiles of 128 on 4 SMs, or 8 of 64: 2 waves
    (256, (128, 128), 100 + ITER_NS),               # 4 tiles of 128 fill the SMs; 16 of 64 take 4 waves
])
def test_the_fastest_tile_wins(n, tile, time_ns):
    plan = plan_gemm(TWO_TILES, GemmShape(256, n, 64), 4e12, itemsize=2, hbm_bytes=0)
    assert (plan.tile_m, plan.tile_n) == tile
    assert plan.time_ns == pytest.approx(time_ns)


def test_small_tiles_starve_on_the_l2_feed():
    # 10 B/ns of L2 per SM: a 64x64 K step moves (64 + 64) x 64 x 2 B = 16 KiB -> 1,638.4 ns
    starved = derive(TWO_TILES, l2_bytes_per_s=4e10)
    plan = plan_gemm(starved, GemmShape(256, 128, 64), 4e12, 2, 0)
    assert (plan.tile_m, plan.tile_n) == (64, 64) and plan.iter_ns == pytest.approx(1638.4)
    assert plan.compute_ns == pytest.approx(2 * (100 + 1638.4))


def test_stream_k_shares_a_partial_last_wave():
    # 5 tiles on 4 SMs, 4 K steps each: data-parallel takes 2 full waves; stream-K gives every
    # SM ceil((1 + 4) x 4 / 4) = 5 steps plus one 64 KiB fp32 partial tile written and read back
    plan = plan_gemm(ROUND, GemmShape(640, 128, 256), 4e12, 2, 0)
    assert plan.stream_k and plan.iters_per_cta == 5
    assert plan.compute_ns == pytest.approx(100 + 5 * ITER_NS + 2 * 128 * 128 * 4 / 1000)
    assert plan.compute_ns < 2 * (100 + 4 * ITER_NS)


@pytest.mark.parametrize("config", [PRESETS["a100"], PRESETS["h100"], PRESETS["h200"]])
def test_square_gemm_time_grows_with_size(config):
    times = [gemm_cost(config, GemmShape(n, n, n), "bfloat16", 0.0).device_ns
             for n in range(512, 8192 + 1, 256)]
    assert times == sorted(times)
    # and throughput no longer falls between powers of two (one tile shape made it dip)
    rates = [2 * n**3 / gemm_cost(config, GemmShape(n, n, n), "bfloat16", 0.0).device_ns
             for n in (512, 1024, 2048, 4096, 8192)]
    assert rates == sorted(rates)


# -- L2 ---------------------------------------------------------------------------------------
def test_small_kernel_traffic_is_served_from_l2():
    fits = 2**20 // 2                                     # l2_resident_fraction 0.5 of 1 MiB
    hit = stream_cost(ROUND, 0, "float32", fits // 2, fits // 2, LAUNCH)
    miss = stream_cost(ROUND, 0, "float32", fits // 2, fits // 2 + 1, LAUNCH)
    assert hit.l2_hit and not miss.l2_hit
    assert hit.memory_ns == pytest.approx(50 + fits / 4000)
    assert miss.memory_ns == pytest.approx(100 + (fits + 1) / 500)
    (event,) = stream(SMALL).trace.events[-1:]
    assert event.opcode == "l2_stream"


def test_fused_kernel_serves_each_records_traffic_where_eager_would():
    # SMALL's 2 kB would hit L2 alone, BIG's 4 MB would not: HBM latency, then both shares
    cost = fused_cost(ROUND, [SMALL, BIG], LAUNCH)
    assert not cost.l2_hit
    assert cost.memory_ns == pytest.approx(100 + 4_000_000 / 500 + 2000 / 4000)
    assert fused_cost(ROUND, [SMALL, SMALL], LAUNCH).memory_ns == pytest.approx(50 + 4000 / 4000)


# -- efficiency from published measurements ---------------------------------------------------
def test_efficiency_ceiling_is_the_mamf_best_shape_fraction():
    assert a100.max_compute_efficiency == pytest.approx(267.9 / 312, abs=5e-4)
    assert h100.max_compute_efficiency == pytest.approx(821.0 / 989, abs=5e-4)
    assert "MAMF" in a100.source("max_compute_efficiency") and "A100" in a100.source("max_compute_efficiency")
    assert "GH200" in h100.source("max_compute_efficiency")


def test_gh200_is_an_h100_die_with_its_own_memory():
    assert (gh200.sm_count, gh200.bf16_tensor_flops_per_s) == (h100.sm_count, h100.bf16_tensor_flops_per_s)
    assert gh200.hbm_bytes_per_s == 4000e9 and "GH200" in gh200.source("hbm_bytes_per_s")
    assert "gh200" not in PRESETS


def test_gpu_fidelity_rows():
    rows = gpu_fidelity_rows()
    assert [r["hardware"] for r in rows] == ["a100", "gh200"]
    for row in rows:
        assert set(row) == {"workload", "hardware", "predicted", "published", "unit", "ratio", "source",
                            "flops", "predicted_ns", "published_ns", "band"}
        band = row["band"]
        assert band.low_ns <= row["predicted_ns"] <= band.high_ns
        assert band.nominal_ns == pytest.approx(row["predicted_ns"])
        assert row["predicted_ns"] / row["published_ns"] == pytest.approx(row["published"] / row["predicted"])
        assert row["unit"] == "TFLOP/s" and row["ratio"] == pytest.approx(row["predicted"] / row["published"])
        assert "MAMF" in row["source"]
    assert [r["published"] for r in rows] == [267.9, 821.0]
