"""dynamic=True and mark_dynamic: one graph for the dynamic dim, CPU values, per-call cost of each shape."""
import copy

import pytest
import torch

import backend.compile
from backend import recording
from backend.sim.gpu.timeline import GpuSession


def _mlp(width: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))


def _kernel_ns(f, x) -> float:
    session = GpuSession()
    with recording.recording(session):
        f(x)
    return sum(op.end_ns - op.start_ns for op in session.trace.ops if op.kind == "kernel")


def test_dynamic_true_forward_and_backward_match_cpu_with_one_graph(neuron):
    cpu = _mlp()
    dev = copy.deepcopy(cpu).to(neuron)
    f = torch.compile(dev, backend="neuron", dynamic=True)
    for rows in (2, 5, 9):
        x = torch.randn(rows, 16)
        out = f(x.to(neuron))
        ref = cpu(x)
        torch.testing.assert_close(out.cpu(), ref)
        out.square().sum().backward()
        ref.square().sum().backward()
        for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters()):
            torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad)
    (graph,) = backend.compile.compiled_graphs()
    assert graph.dynamic and not graph.is_recompile


def test_mark_dynamic_compiles_one_symbolic_graph(neuron):
    cpu = _mlp()
    f = torch.compile(copy.deepcopy(cpu).to(neuron), backend="neuron")
    for rows in (3, 6, 11):
        x = torch.randn(rows, 16)
        xd = x.to(neuron)
        torch._dynamo.mark_dynamic(xd, 0)
        torch.testing.assert_close(f(xd).cpu(), cpu(x))
    (graph,) = backend.compile.compiled_graphs()
    assert graph.dynamic


def test_dynamic_call_costs_its_own_shape_like_the_static_compile(neuron):
    model = _mlp(256).to(neuron)
    dynamic = torch.compile(model, backend="neuron", dynamic=True)
    dynamic(torch.randn(3, 256, device=neuron))          # parameter layouts are paid here, once
    d2, d8, d64 = (_kernel_ns(dynamic, torch.randn(rows, 256, device=neuron)) for rows in (2, 8, 64))
    assert d2 < d8 < d64
    torch._dynamo.reset()
    backend.compile.register()
    static = torch.compile(model, backend="neuron", dynamic=False)
    for rows, d in ((8, d8), (64, d64)):
        x = torch.randn(rows, 256, device=neuron)
        static(x)
        assert _kernel_ns(static, x) == pytest.approx(d, rel=1e-6)


def test_new_shape_of_a_dynamic_graph_does_not_pay_parameter_layouts_again(neuron):
    model = _mlp(256).to(neuron)
    f = torch.compile(model, backend="neuron", dynamic=True)
    session = GpuSession()
    with recording.recording(session):
        for rows in (2, 8, 8):
            f(torch.randn(rows, 256, device=neuron))
    names = [op.name for op in session.trace.ops if op.kind == "kernel"]
    assert all(names.count(n) == 1 for n in names if n.startswith("layout_"))
    assert any(n.startswith("layout_") for n in names)


def test_tiny_llama_dynamic_sequence_length_matches_cpu(neuron):
    from workbench.models.configs import LlamaConfig
    from workbench.models.llama import Llama

    torch.manual_seed(0)
    cpu = Llama(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2))
    f = torch.compile(copy.deepcopy(cpu).to(neuron), backend="neuron", dynamic=True)
    for seq in (4, 7, 12):
        ids = torch.randint(0, 64, (2, seq))
        torch.testing.assert_close(f(ids.to(neuron)).cpu(), cpu(ids))
    graphs = backend.compile.compiled_graphs()
    assert len(graphs) <= 2 and graphs[-1].dynamic
