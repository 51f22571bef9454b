"""Collectives overlap the compute that does not depend on them; only a wait is exposed.

The DDP pattern on a tiny stream: layer 2's backward, then the all_reduce of its gradient bucket
on the collectives lane while layer 1's backward runs, then the copy of the reduced bucket into
``.grad``, which waits for it. Durations are explicit, so every number is exact.
"""
import pytest

from backend.lowering.timeline import feed_record
from backend.sim.collectives import collective_cost
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.gpu import GpuSession
from backend.sim.ir import Instruction, Program
from backend.sim.overlap import WAIT_OP, CollectiveLane, communication_breakdown
from backend.sim.scheduler import Simulator
from backend.sim.trace import OpSummary


def _program(name, engine, ns):
    program = Program(name)
    program.add(Instruction(engine, "host_compute" if engine == "host" else "all_reduce", duration_ns=ns))
    return program


def _run(stream):
    """``stream``: (record index, name, ns, waits_for) -> the simulator's trace."""
    sim, lane = Simulator("trn2"), CollectiveLane()
    for index, name, ns, waits in stream:
        record = OpRecord(index, name, (), (), attrs={"waits_for": waits} if waits else {})
        engine = "collective" if name.startswith("collective::") else "host"
        feed_record(sim, lane, record, None if name == WAIT_OP else _program(name, engine, ns))
    return sim.trace


def _ddp_stream(all_reduce_ns):
    return [(0, "backward_layer2", 10_000.0, None),
            (1, "collective::all_reduce", all_reduce_ns, None),      # bucket 1, async
            (2, "backward_layer1", 20_000.0, None),
            (3, "copy_bucket_to_grad", 5_000.0, (1,))]


def _spans(trace):
    return [(op.name, op.kind, op.start_ns, op.end_ns) for op in trace.ops]


def test_all_reduce_longer_than_the_next_backward_is_exposed_by_the_difference():
    trace = _run(_ddp_stream(25_000.0))
    assert _spans(trace) == [
        ("backward_layer2", "op", 0.0, 10_000.0),
        ("collective::all_reduce", "op", 10_000.0, 35_000.0),     # on its lane, beside layer 1
        ("backward_layer1", "op", 10_000.0, 30_000.0),
        (WAIT_OP, "wait", 30_000.0, 35_000.0),                    # the copy waits for the bucket
        ("copy_bucket_to_grad", "op", 35_000.0, 40_000.0)]
    summary = trace.summary()
    assert summary["total_time_ns"] == 40_000.0
    assert summary["compute_time"] == pytest.approx(35e-6)
    assert summary["communication_time"] == pytest.approx(25e-6)
    assert summary["exposed_communication_time"] == pytest.approx(5e-6)
    assert summary["op_count"] == 4                               # the wait is no op


def test_all_reduce_hidden_behind_the_next_backward_is_not_exposed():
    trace = _run(_ddp_stream(15_000.0))
    assert WAIT_OP not in [op.name for op in trace.ops]
    summary = trace.summary()
    assert summary["total_time_ns"] == 35_000.0
    assert summary["communication_time"] == pytest.approx(15e-6)
    assert summary["exposed_communication_time"] == 0.0


def test_work_wait_right_after_the_collective_exposes_all_of_it():
    trace = _run([(0, "forward", 10_000.0, None), (1, "collective::all_reduce", 25_000.0, None),
                  (2, WAIT_OP, 0.0, (1,)), (3, "forward", 10_000.0, None)])
    assert _spans(trace)[2:] == [(WAIT_OP, "wait", 10_000.0, 35_000.0), ("forward", "op", 35_000.0, 45_000.0)]
    assert trace.summary()["exposed_communication_time"] == pytest.approx(25e-6)


def test_collectives_queue_on_one_lane():
    trace = _run([(0, "collective::all_reduce", 10_000.0, None), (1, "collective::all_reduce", 10_000.0, None),
                  (2, "backward", 5_000.0, (0, 1))])
    assert _spans(trace) == [("collective::all_reduce", "op", 0.0, 10_000.0),
                             ("collective::all_reduce", "op", 10_000.0, 20_000.0),
                             (WAIT_OP, "wait", 0.0, 20_000.0), ("backward", "op", 20_000.0, 25_000.0)]


def test_gpu_collectives_run_on_the_nccl_stream_for_the_topology_time():
    session = GpuSession("h100")
    t = TensorDesc((1 << 20,), "float32")
    session.feed(OpRecord(7, "collective::all_reduce", (t,), (t,), attrs={
        "collective": "all_reduce", "nbytes": t.nbytes, "ranks": 16, "topology": "dgx-h100"}))
    session.feed(OpRecord(8, WAIT_OP, (), (), attrs={"waits_for": (7,)}))
    launch = session.config.launch_overhead_ns
    cost = collective_cost("all_reduce", t.nbytes, 16, "dgx-h100").time_ns
    assert _spans(session.trace) == [("collective::all_reduce", "op", launch, launch + cost),
                                     (WAIT_OP, "wait", 0.0, launch + cost)]
    assert "collective" in session.trace.engines
    assert session.trace.summary()["exposed_communication_time"] == pytest.approx(cost * 1e-9)


def test_breakdown_of_overlapping_intervals():
    def op(name, start, end, kind="op"):
        return OpSummary(0, name, kind, start_ns=start, end_ns=end)
    ops = [op("a", 0, 10), op("b", 5, 20), op("collective::all_gather", 15, 40),
           op("c", 25, 30), op("collective::all_reduce", 35, 50), op(WAIT_OP, 30, 50, "wait")]
    assert communication_breakdown(ops) == {"compute_time_ns": 25.0, "communication_time_ns": 35.0,
                                            "exposed_communication_time_ns": 25.0}
