"""The backend is registered, listed, and says clearly what it does not support."""
import warnings

import pytest
import torch

import backend.compile


def test_registered_and_listed():
    backend.compile.register()
    backend.compile.register()           # idempotent
    assert backend.compile.is_registered()
    assert "neuron" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("neuron") is backend.compile.neuron_backend


def test_fullgraph_small_function(neuron):
    def f(x, y):
        return torch.tanh(x @ y + 1).sum(dim=-1)

    x, y = torch.randn(8, 16), torch.randn(16, 4)
    out = torch.compile(f, backend="neuron", fullgraph=True)(x.to(neuron), y.to(neuron))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), f(x, y))
    (graph,) = backend.compile.compiled_graphs()
    assert graph.frame == "f" and graph.forward.part == "inference"


def test_unknown_mode_is_an_error(neuron):
    f = torch.compile(lambda x: x + 1, backend="neuron", mode="fastest")
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        f(torch.ones(3, device=neuron))


def test_max_autotune_warns_and_compiles(neuron):
    f = torch.compile(lambda x: x * 2, backend="neuron", mode="max-autotune")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(torch.ones(3, device=neuron))
    assert any("max-autotune" in str(w.message) for w in caught)
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]
    assert backend.compile.compiled_graphs()[0].mode == "max-autotune"


def test_unknown_option_is_an_error(neuron):
    f = torch.compile(lambda x: x + 1, backend="neuron", options={"unroll": 4})
    with pytest.raises(Exception, match="unknown option 'unroll'"):
        f(torch.ones(3, device=neuron))
