"""A collective record lowers to one instruction on the collectives lane, timed by the topology."""
import pytest

from backend.lowering import lower, simulate
from backend.sim.collectives import collective_cost
from backend.sim.descriptors import OpRecord, TensorDesc


def _record(name="all_gather", nbytes=4096, ranks=8, topology="dgx-a100"):
    t = TensorDesc((nbytes // 4,), "float32")
    return OpRecord(0, f"collective::{name}", (t,), (t,), attrs={
        "collective": name, "nbytes": nbytes, "ranks": ranks, "topology": topology, "algorithm": "auto"})


def test_collective_runs_on_its_own_lane_for_the_model_time():
    program = lower(_record())
    [ins] = program.instructions
    assert (ins.engine, ins.opcode) == ("collective", "all_gather")
    trace = simulate([_record()])
    op = trace.ops[0]
    assert op.end_ns - op.start_ns == pytest.approx(collective_cost("all_gather", 4096, 8, "dgx-a100").time_ns)
    assert trace.engines[-1] == "collective"


def test_traces_without_collectives_keep_their_tracks():
    t = TensorDesc((4,), "float32")
    trace = simulate([OpRecord(0, "aten::add", (t, t), (t,))])
    assert "collective" not in trace.engines
