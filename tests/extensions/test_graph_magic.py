"""%neuron_graphs: the session's compiled graphs as a table, one graph as a figure and FX code."""
import pytest
import torch
from IPython.core.error import UsageError

import extensions.graph_magics
from ext_display import outputs
from workbench.graphs import CompiledGraph, GraphNode

PLOTLY = "application/vnd.plotly.v1+json"


def synthetic(name: str) -> CompiledGraph:
    nodes = [GraphNode("x", "placeholder"), GraphNode("mm", target="aten.mm.default", group="k0", cost_ns=900.0),
             GraphNode("relu", target="aten.relu.default", group="k0", cost_ns=900.0), GraphNode("output", "output")]
    return CompiledGraph(name, nodes, [("x", "mm"), ("mm", "relu"), ("relu", "output")],
                         fx_text=f"graph {name}: mm -> relu", kernel_cost_ns={"k0": 900.0})


@pytest.fixture
def graphs(shell, monkeypatch):
    listed = [synthetic("first"), synthetic("second")]
    monkeypatch.setattr(extensions.graph_magics, "compiled_graphs", lambda: list(listed))
    return listed


def test_none_yet(shell, monkeypatch):
    monkeypatch.setattr(extensions.graph_magics, "compiled_graphs", list)
    result, shown = outputs(shell.run_line_magic, "neuron_graphs", "-o")
    assert result == []
    assert "No graphs compiled yet" in shown[0]["text/html"]


def test_table_lists_every_graph(graphs, shell):
    result, shown = outputs(shell.run_line_magic, "neuron_graphs", "")
    assert result is None
    assert "first" in shown[0]["text/html"] and "second" in shown[0]["text/html"]


@pytest.mark.parametrize("key,expected", [("0", "first"), ("-1", "second"), ("first", "first")])
def test_one_graph_drawn_with_its_fx_code(graphs, shell, key, expected):
    result, shown = outputs(shell.run_line_magic, "neuron_graphs", f"{key} -o")
    assert result.name == expected
    figures = [b[PLOTLY] for b in shown if PLOTLY in b]
    assert len(figures) == 1 and expected in figures[0]["layout"]["title"]["text"]
    assert any(f"graph {expected}: mm -&gt; relu" in b.get("text/html", "") for b in shown)


@pytest.mark.parametrize("line,message", [("2", "graph index 2 out of range: 2 compiled"),
                                          ("-3", "out of range"), ("third", "no compiled graph named 'third'"),
                                          ("0 1", "unrecognized arguments")])
def test_bad_graph_is_a_usage_error(graphs, shell, line, message):
    with pytest.raises(UsageError, match=message) as info:
        shell.run_line_magic("neuron_graphs", line)
    assert "%neuron_graphs [-o] [graph]" in str(info.value)


def test_graphs_of_the_compile_layer(shell):
    """End to end: a function compiled with the neuron backend shows up, with its parts."""
    from workbench.session import compiled_graphs, ensure_compile_backend

    ensure_compile_backend("neuron")
    before = len(compiled_graphs())
    f = torch.compile(lambda a: torch.relu(a @ a + 1), backend="neuron")
    f(torch.randn(8, 8, device="neuron"))
    result, shown = outputs(shell.run_line_magic, "neuron_graphs", "-o")
    assert len(result) > before
    _, shown = outputs(shell.run_line_magic, "neuron_graphs", "-1")
    assert any(PLOTLY in b for b in shown)
