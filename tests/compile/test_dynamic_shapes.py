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


def _write_slots(cache: torch.Tensor, new: torch.Tensor, start: int) -> torch.Tensor:
    """A KV-cache slot write as Hugging Face's caches write it: through a full leading slice."""
    cache[:, :, start:start + new.shape[2]].copy_(new)
    return cache[:, :, :start + new.shape[2]].sum()


def test_a_write_through_a_full_slice_costs_no_whole_buffer_copy_when_sizes_are_symbolic(neuron):
    """Functionalised, ``cache[:, :, i:j].copy_(v)`` ends in a slice_scatter over the whole leading
    axis; a static trace folds it, a symbolic one must not time it as a copy of the buffer."""
    def run(f, batch, start):
        cache = torch.zeros(batch, 2, 64, 16, device=neuron)
        new = torch.ones(batch, 2, 1, 16, device=neuron)
        f(cache, new, start)                                  # compile, lay out
        session = GpuSession()
        with recording.recording(session):
            out = f(cache, new, start)
        torch.testing.assert_close(out.cpu(), torch.tensor(float(batch * 2 * 16)))
        return session.trace.ops

    dynamic = torch.compile(_write_slots, backend="neuron", dynamic=True)
    ops = run(dynamic, 4, 9)
    assert backend.compile.compiled_graphs()[-1].dynamic
    torch._dynamo.reset()
    backend.compile.register()
    static = torch.compile(_write_slots, backend="neuron", dynamic=False)
    static_ops = run(static, 4, 9)
    scatters = lambda ops: sum("slice_scatter" in op.name for op in ops)
    kernel_ns = lambda ops: sum(op.end_ns - op.start_ns for op in ops if op.kind == "kernel")
    assert scatters(ops) == scatters(static_ops) == 1
    assert kernel_ns(ops) == pytest.approx(kernel_ns(static_ops), rel=1e-9)
