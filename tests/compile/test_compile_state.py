"""The compile layer's state (graph log, Dynamo bookkeeping) lives in one object, ``state.STATE``."""
import torch

import backend.compile
from backend.compile.state import STATE, CompileState


def test_reset_clears_the_log_and_keeps_what_dynamo_cannot_undo():
    state = CompileState()
    state.graphs.append("graph")
    state.seen_breaks["reason"] = 2
    state.seen_failures["code"] = 1
    state.trace_rules_added = True
    state.tracing.stack = ["open suspension"]
    state.reset()
    assert not state.graphs and not state.seen_breaks and not state.seen_failures
    assert state.trace_rules_added and state.tracing.stack == ["open suspension"]


def test_a_compile_is_logged_on_the_compile_state(neuron):
    torch._dynamo.reset()
    backend.compile.reset()
    try:
        compiled = torch.compile(lambda x: (x * 2).sin(), backend="neuron")
        compiled(torch.ones(4, device="neuron"))
        assert STATE.trace_rules_added
        assert len(STATE.graphs) == 1 and backend.compile.compiled_graphs() == STATE.graphs
        assert not getattr(STATE.tracing, "stack", [])   # the tracing suspension closed
        STATE.reset()
        assert backend.compile.compiled_graphs() == []
    finally:
        torch._dynamo.reset()
        backend.compile.reset()
