"""The TPU timeline: XLA-style fusion of the op stream, compiled kernels, transfers, views."""
from __future__ import annotations

import pytest

from backend.sim.tpu import TPU_ENGINES, TpuSession, fused_cost, record_cost
from tpu_records import ROUND, T, rec

F = "float32"
X = T(1000, dtype=F)                        # 4,000 bytes


def _ew(name, *inputs):
    return rec(name, inputs, [X])


def test_an_elementwise_chain_is_one_fusion_whose_intermediates_stay_on_chip():
    session = TpuSession(ROUND)
    session.feed(_ew("aten::mul", X, X))    # t = x * y
    session.feed(_ew("aten::add", X, X))    # out = t + z: t never goes to HBM
    trace = session.trace
    assert len(trace.ops) == 1
    (op,) = trace.ops
    assert op.kind == "kernel" and op.nodes == ("aten::mul", "aten::add")
    # reads x, y, z (12 kB) and writes out (4 kB); t's write and read (8 kB) are saved
    assert (op.hbm_read_bytes, op.hbm_write_bytes) == (12_000, 4000)
    assert op.end_ns == pytest.approx(100 + 16_000 / 500)
    assert op.launch_overhead_ns == 100


def test_unfused_ops_would_cost_more():
    mul, add = _ew("aten::mul", X, X), _ew("aten::add", X, X)
    fused = TpuSession(ROUND)
    for r in (mul, add):
        fused.feed(r)
    separate = sum(record_cost(ROUND, r).total_ns for r in (mul, add))
    assert fused.trace.total_time_ns < separate


def test_a_matmul_starts_a_fusion_and_takes_its_epilogue():
    session = TpuSession(ROUND)
    session.feed(_ew("aten::mul", X, X))
    mm = rec("aten::mm", [T(128, 128), T(128, 128)], [T(128, 128)])
    relu = rec("aten::relu", [T(128, 128)], [T(128, 128)])
    session.feed(mm)
    session.feed(relu)
    ops = session.trace.ops
    assert [op.kind for op in ops] == ["op", "kernel"]
    assert ops[1].nodes == ("aten::mm", "aten::relu")
    expected = fused_cost(ROUND, [mm, relu], internal_bytes_saved=2 * 128 * 128 * 2)
    assert ops[1].end_ns - ops[1].start_ns == pytest.approx(expected.total_ns)
    assert ops[1].hardware_flops == 2 * 128 ** 3 + 128 * 128
    assert ops[1].busy_ns["tensor"] == pytest.approx(2 * 128 ** 3 / 500)
    engines = {e.engine for e in session.trace.events}
    assert engines <= set(TPU_ENGINES) and {"tensor", "vector", "hbm"} <= engines


def test_views_are_free_and_keep_an_intermediate_live():
    session = TpuSession(ROUND)
    session.feed(_ew("aten::mul", X, X))
    session.feed(rec("aten::view", [X], [T(10, 100, dtype=F)], is_view=True))
    session.feed(rec("aten::neg", [T(10, 100, dtype=F)], [T(10, 100, dtype=F)]))
    ops = session.trace.ops
    assert [op.kind for op in ops] == ["kernel", "view"]         # the view's row follows its fusion
    assert ops[1].end_ns == ops[1].start_ns == ops[0].end_ns
    assert (ops[0].hbm_read_bytes, ops[0].hbm_write_bytes) == (8000, 4000)


def test_reading_the_trace_after_every_op_changes_nothing():
    ops = [_ew("aten::mul", X, X), rec("aten::view", [X], [T(10, 100, dtype=F)], is_view=True),
           rec("aten::neg", [T(10, 100, dtype=F)], [T(10, 100, dtype=F)]),
           rec("aten::mm", [T(128, 128), T(128, 128)], [T(128, 128)]),
           rec("aten::relu", [T(128, 128)], [T(128, 128)])]
    quiet, watched = TpuSession(ROUND), TpuSession(ROUND)
    for record in ops:
        quiet.feed(record)
        watched.feed(record)
        assert watched.trace.ops            # a reader (the memory sampler) looks after every op
    assert [o.to_record() for o in watched.trace.ops] == [o.to_record() for o in quiet.trace.ops]
    assert watched.trace.events == quiet.trace.events
    assert [o.kind for o in quiet.trace.ops] == ["kernel", "view", "kernel"]


def test_transfers_close_the_fusion_and_use_the_host_link():
    session = TpuSession(ROUND)
    session.feed(_ew("aten::mul", X, X))
    session.feed(rec("aten::_to_copy", [X], [X], transfer="d2h"))
    ops = session.trace.ops
    assert [op.kind for op in ops] == ["op", "transfer"]
    assert ops[1].end_ns - ops[1].start_ns == pytest.approx(4000.0)     # 4 kB at 1 B/ns
    assert ops[1].hbm_read_bytes == 4000
    with pytest.raises(ValueError, match="unknown transfer 'p2p'"):
        session.feed(rec("aten::copy_", [X], [X], transfer="p2p"))


def test_compiled_kernels_are_one_fusion_each():
    session = TpuSession(ROUND)
    work = [_ew("aten::mul", X, X), _ew("aten::add", X, X)]
    session.feed_kernel("fused_mul_add", work, internal_bytes_saved=8000, nodes=("mul", "add"))
    (op,) = session.trace.ops
    assert op.name == "fused_mul_add" and op.kind == "kernel" and op.nodes == ("mul", "add")
    assert op.end_ns == pytest.approx(fused_cost(ROUND, work, 8000).total_ns)


def test_trace_metadata_and_reset():
    session = TpuSession("v5e")
    session.feed(_ew("aten::mul", X, X))
    trace = session.trace
    assert (trace.target, trace.device_kind, trace.peak_flops_per_s) == ("v5e", "tpu", 197e12)
    summary = trace.summary()
    assert summary["device_kind"] == "tpu" and summary["launch_count"] == 1
    session.reset()
    assert session.trace.ops == []
