"""Compiled == eager neuron == CPU, forward and backward, and through optimizer steps."""
import copy

import pytest
import torch
import torch.nn as nn

import backend.compile
from benchmarks.compile_bench import Block, TinyGPT, train_step

MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                                  nn.Linear(64, 10)), lambda: torch.randn(8, 20)),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
            lambda: torch.randn(4, 3, 16, 16)),
    "transformer_block": (lambda: Block(d=32, heads=4, seq=16), lambda: torch.randn(2, 16, 32)),
}


def _grads(model):
    return {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_backward_match_eager_and_cpu(neuron, name):
    build, make_input = MODELS[name]
    torch.manual_seed(0)
    cpu = build()
    eager = copy.deepcopy(cpu).to(neuron)
    compiled_model = copy.deepcopy(cpu).to(neuron)
    compiled = torch.compile(compiled_model, backend="neuron")
    x = make_input()
    results = {}
    for key, model, inp in (("cpu", cpu, x), ("eager", eager, x.to(neuron)),
                            ("compiled", compiled, x.to(neuron))):
        out = model(inp)
        out.pow(2).mean().backward()
        results[key] = (out.detach().cpu(), _grads(compiled_model if key == "compiled" else model))
    for key in ("eager", "compiled"):
        torch.testing.assert_close(results[key][0], results["cpu"][0], rtol=1e-5, atol=1e-5)
        for param, grad in results[key][1].items():
            torch.testing.assert_close(grad, results["cpu"][1][param], rtol=1e-4, atol=1e-5,
                                       msg=lambda m, p=param, k=key: f"{k} grad of {p}: {m}")
    graph = backend.compile.compiled_graphs()[0]
    assert graph.backward is not None and graph.backward.kernel_count > 0


def test_training_loop_with_optimizer_matches_cpu(neuron):
    torch.manual_seed(0)
    cpu = TinyGPT(vocab=64, d=32, heads=4, layers=2, seq=16)
    dev = copy.deepcopy(cpu).to(neuron)
    compiled = torch.compile(dev, backend="neuron")
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=1e-3)
    for step in range(3):
        idx, tgt = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
        loss_cpu = train_step(cpu, opt_cpu, idx, tgt)
        loss_dev = train_step(compiled, opt_dev, idx.to(neuron), tgt.to(neuron))
        torch.testing.assert_close(loss_dev.detach().cpu(), loss_cpu.detach(), rtol=1e-4, atol=1e-5)
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
        assert p_dev.device.type == "neuron"
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    # one Dynamo graph for the model, compiled once (no recompiles across steps)
    graphs = backend.compile.compiled_graphs()
    assert len(graphs) == 1 and set(graphs[0].parts) == {"forward", "backward"}


def test_compiled_optimizer_step_matches_eager(neuron):
    torch.manual_seed(0)
    params = [torch.randn(16, 8), torch.randn(8)]
    grads = [torch.randn_like(p) for p in params]
    ref = [p.clone().requires_grad_() for p in params]
    dev = [p.to(neuron).requires_grad_() for p in params]
    for p, g in zip(ref, grads):
        p.grad = g.clone()
    for p, g in zip(dev, grads):
        p.grad = g.to(neuron)
    opt_ref, opt_dev = torch.optim.SGD(ref, lr=0.1, momentum=0.9), torch.optim.SGD(dev, lr=0.1, momentum=0.9)
    step = torch.compile(opt_dev.step, backend="neuron")
    for _ in range(2):
        opt_ref.step()
        step()
    for p_ref, p_dev in zip(ref, dev):
        torch.testing.assert_close(p_dev.detach().cpu(), p_ref.detach())


def test_factory_inside_compiled_graph(neuron):
    def f(x):
        return x * torch.arange(x.shape[-1], device=x.device) + torch.ones(x.shape, device=x.device)

    x = torch.randn(3, 5)
    out = torch.compile(f, backend="neuron", fullgraph=True)(x.to(neuron))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), f(x))
