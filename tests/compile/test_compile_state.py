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


def test_a_graph_joins_the_log_with_its_first_compiled_part():
    """Dynamo may hand the backend a frame and discard that attempt (a symbolic trace whose compile
    specialised a size is re-traced): a graph with no compiled part is never shown."""
    from backend.compile.graph_log import CompiledPartInfo, add_part, new_graph
    backend.compile.reset()
    try:
        discarded, kept = new_graph("f", "0/0"), new_graph("f", "0/0")
        assert backend.compile.compiled_graphs() == []
        gm = torch.fx.symbolic_trace(lambda x: x + 1)
        add_part(kept, CompiledPartInfo(part="inference", graph_module=gm, groups=[]))
        add_part(kept, CompiledPartInfo(part="backward", graph_module=gm, groups=[]))
        assert backend.compile.compiled_graphs() == [kept] and list(kept.parts) == ["inference", "backward"]
        assert not discarded.parts
    finally:
        backend.compile.reset()
