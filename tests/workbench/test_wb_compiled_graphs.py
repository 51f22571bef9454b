"""A profile attaches the compiled graphs whose kernels ran in it, also after a warm-up call."""
from __future__ import annotations

import pytest
import torch

import backend.compile
import workbench


@pytest.fixture(autouse=True)
def fresh_compile():
    torch._dynamo.reset()
    backend.compile.register()
    backend.compile.reset()
    yield
    torch._dynamo.reset()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to("neuron")


def test_profile_after_warm_up_shows_the_graphs_that_ran(neuron):
    model = torch.compile(_model(), backend="neuron")
    other = torch.compile(lambda t: torch.tanh(t) + 1, backend="neuron")
    x = torch.randn(4, 16, device="neuron")
    model(x), other(x * 2)                  # the usual warm-up: compiles outside the profile
    assert len(backend.compile.compiled_graphs()) == 2
    with workbench.profile() as prof:
        model(x)
    assert prof.summary["graph_count"] == 1                         # the graph that ran, not `other`'s
    assert prof.graphs[0].name.startswith(backend.compile.compiled_graphs()[0].name)
    assert (prof.ops["kind"] == "kernel").any()


def test_dynamic_graph_reusing_an_earlier_shape_is_attached(neuron):
    f = torch.compile(lambda x: torch.relu(x * 2), backend="neuron", dynamic=True)
    a, b = torch.randn(4, 8, device="neuron"), torch.randn(6, 8, device="neuron")
    with workbench.profile():
        f(a), f(b)                           # kernels built for both shapes while recording
    with workbench.profile() as prof:
        f(a)                                 # an earlier shape's kernels, not the latest
    assert prof.summary["graph_count"] == 1
