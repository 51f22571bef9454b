"""Eager and compiled runs of one program agree on the work: the same model FLOPs, and compiled
HBM traffic at most eager's (a fused kernel keeps intermediates in SBUF; it never adds HBM bytes).

A training step is compared from the same state on both sides: gradients cleared as
``optimizer.zero_grad()`` leaves them, or both accumulating into gradients a previous step left
(``AccumulateGrad`` then adds one elementwise ``add_`` per parameter, outside the compiled graph)."""
import pytest
import torch
from torch import nn

import workbench as wb


def _mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256)).to("neuron")
    return model, torch.randn(64, 256, device="neuron")


def _transformer_block():
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True).to("neuron")
    return model, torch.randn(4, 64, 256, device="neuron")


def _inference(model, x):
    with torch.no_grad():
        model(x)


def _training(model, x):
    model.zero_grad(set_to_none=True)
    x.grad = None
    model(x).square().mean().backward()


def _accumulating(model, x):
    model(x).square().mean().backward()


def _grads(model):
    return [p.grad for p in model.parameters()]


# The MLP on both NeuronCore kinds; the transformer block (attention, two norms, residuals) on the
# default target, its training steps only, to keep the file fast.
_CASES = [*((t, _mlp, r) for t in ("trn1", "trn2") for r in (_inference, _training, _accumulating)),
          ("trn2", _transformer_block, _training), ("trn2", _transformer_block, _accumulating)]


@pytest.mark.parametrize("target, build, run", _CASES,
                         ids=[f"{t}-{b.__name__.strip('_')}-{r.__name__.strip('_')}" for t, b, r in _CASES])
def test_compiled_does_the_same_flops_with_no_more_hbm_traffic(run, build, target):
    model, x = build()
    x.requires_grad_(run is not _inference)
    compiled = torch.compile(model, backend="neuron")
    if run is _accumulating:          # both measured steps add into gradients already there
        _training(model, x)
    run(model, x)                     # warm-up eager, as the compiled run compiles outside the measurement
    run(compiled, x)
    with wb.profile(target=target) as eager:
        run(model, x)
    with wb.profile(target=target) as fused:
        run(compiled, x)
    e, c = eager.summary, fused.summary
    assert c["graph_count"] >= 1
    assert c["total_flops"] == e["total_flops"]
    assert c["hbm_read_bytes"] + c["hbm_write_bytes"] <= e["hbm_read_bytes"] + e["hbm_write_bytes"]
    assert c["total_time"] <= e["total_time"] * 1.02
    if run is not _inference:
        assert all(g is not None for g in _grads(model))


def test_a_step_that_starts_from_gradients_does_more_work():
    """The state a step starts from is part of what it costs: accumulating into existing
    gradients adds one read-modify-write of every gradient (the cost the two comparisons above
    keep equal on both sides)."""
    model, x = _mlp()
    x.requires_grad_(True)
    with wb.profile(target="trn1") as fresh:
        _training(model, x)
    with wb.profile(target="trn1") as accumulating:
        _accumulating(model, x)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + x.numel() * x.element_size()
    extra = (accumulating.summary["hbm_read_bytes"] + accumulating.summary["hbm_write_bytes"]
             - fresh.summary["hbm_read_bytes"] - fresh.summary["hbm_write_bytes"])
    assert extra == 3 * gradient_bytes        # read old and new, write the sum
