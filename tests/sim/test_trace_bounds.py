"""Long runs stay bounded: events are capped, per-op rows fold into aggregates, totals exact."""
from backend.sim.trace import OpSummary, Trace


def _op(i: int, name: str) -> OpSummary:
    return OpSummary(op_index=i, name=name, kind="op", start_ns=10.0 * i, end_ns=10.0 * i + 5,
                     busy_ns={"vector": 5.0}, hbm_read_bytes=100, flops=7, instruction_count=2)


def test_ops_fold_past_cap_with_exact_totals():
    trace = Trace(target="trn2", max_ops=10)
    for i in range(1000):
        trace.add_op(_op(i, "aten::add" if i % 2 else "aten::mul"))
    assert len(trace.ops) == 12           # 10 detailed rows + one aggregate per name
    assert trace.ops_folded == 990
    summary = trace.summary()
    assert summary["op_count"] == 1000
    assert summary["total_flops"] == 7000 and summary["hbm_read_bytes"] == 100_000
    assert summary["instruction_count"] == 2000
    assert trace.busy_ns_by_engine_class()["vector"] == 5000.0
    folded = {op.name: op for op in trace.ops[10:]}
    assert folded["aten::add"].count == 495 and folded["aten::mul"].count == 495
    assert folded["aten::add"].end_ns == 10.0 * 999 + 5
    assert trace.total_time_ns == 10.0 * 999 + 5


def test_events_capped():
    from backend.sim.trace import InstructionEvent

    trace = Trace(target="trn2", max_events=5)
    for i in range(8):
        trace.add_event(InstructionEvent(i, i + 1, "vector", "tensor_tensor", i))
    assert len(trace.events) == 5 and trace.events_dropped == 3
