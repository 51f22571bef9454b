"""What Dynamo does around the backend: recompiles, dynamic shapes, graph breaks."""
import pytest
import torch

import backend.compile
from backend import recording
from backend.sim.gpu.timeline import GpuSession


def _kernels(trace):
    return [op for op in trace.ops if op.kind == "kernel"]


def test_shape_change_recompiles_with_reason(neuron):
    w = torch.randn(16, 16, device=neuron)
    f = torch.compile(lambda x: torch.relu(x @ w), backend="neuron", dynamic=False)
    for rows in (4, 4, 6):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(f(x.to(neuron)).cpu(), torch.relu(x @ w.cpu()))
    first, second = backend.compile.compiled_graphs()
    assert not first.is_recompile and second.is_recompile
    assert any("size mismatch" in r for r in second.recompile_reasons)
    assert backend.compile.recompile_reasons() == second.recompile_reasons


def test_automatic_dynamic_after_recompile_describes_real_shapes(neuron):
    w = torch.randn(16, 16, device=neuron)
    f = torch.compile(lambda x: torch.relu(x @ w), backend="neuron")
    f(torch.randn(4, 16, device=neuron))
    session = GpuSession()
    with recording.recording(session):
        for rows in (6, 10):       # 6 recompiles with a symbolic batch; 10 reuses that graph
            x = torch.randn(rows, 16)
            torch.testing.assert_close(f(x.to(neuron)).cpu(), torch.relu(x @ w.cpu()))
    graphs = backend.compile.compiled_graphs()
    assert len(graphs) == 2 and graphs[1].dynamic
    shapes = [k.output_shapes for k in _kernels(session.trace)]
    assert len(shapes) == 2 and "6x16" in shapes[0] and "10x16" in shapes[1]
    assert graphs[1].forward.kernels[0].records[0].outputs[0].shape == (10, 16)


def test_dynamic_true_compiles_once(neuron):
    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="neuron", dynamic=True)
    for rows in (3, 5, 7):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(f(x.to(neuron)).cpu(), (x * 2).softmax(-1))
    (graph,) = backend.compile.compiled_graphs()
    assert graph.dynamic


def test_graph_break_runs_eager_in_between(neuron):
    w = torch.randn(8, 8)

    def f(x):
        y = torch.relu(x @ w.to(x.device))
        if y.sum().item() > 0:         # data-dependent branch: Dynamo breaks the graph here
            y = y * 2
        return y.softmax(-1)

    x = torch.randn(4, 8)
    session = GpuSession()
    with recording.recording(session):
        out = torch.compile(f, backend="neuron")(x.to(neuron))
    torch.testing.assert_close(out.cpu(), f(x))
    graphs = backend.compile.compiled_graphs()
    assert len(graphs) == 2
    assert graphs[0].graph_breaks and "item" in graphs[0].graph_breaks[0].lower()
    assert backend.compile.graph_breaks() == graphs[0].graph_breaks
    kinds = [op.kind for op in session.trace.ops]
    # kernels of the first graph, the eager .item() read in between, kernels of the second
    first_kernel, last_kernel = kinds.index("kernel"), len(kinds) - 1 - kinds[::-1].index("kernel")
    between = session.trace.ops[first_kernel:last_kernel]
    assert any(op.kind == "transfer" for op in between)


def test_fullgraph_with_a_break_raises(neuron):
    def f(x):
        return x * 2 if x.sum().item() > 0 else x

    with pytest.raises(Exception, match="item"):
        torch.compile(f, backend="neuron", fullgraph=True)(torch.ones(3, device=neuron))


def test_tracing_is_not_recorded(neuron):
    session = GpuSession()
    f = torch.compile(lambda x: torch.tanh(x) + 1, backend="neuron")
    x = torch.randn(4, 4, device=neuron)
    with recording.recording(session):
        f(x)                                    # compiles inside the recording
    assert [op.kind for op in session.trace.ops] == ["kernel"]
    assert session.trace.ops[0].source.endswith("test_dynamo.py:" + str(_line_of("torch.tanh(x) + 1")))


def _line_of(text):
    import inspect

    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "compile" in line)
