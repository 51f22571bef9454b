"""Empty sizes on the device under wb.profile(): an MoE expert given no tokens trains, eager,
compiled and timing-only, and ops over empty dimensions give CPU's values and a profile."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb


class TinyMoE(nn.Module):
    """Top-1 routing over two experts: every token goes to expert 0, so expert 1 gets none."""

    def __init__(self, d=16):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])

    def forward(self, x):
        route = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx = (route == e).nonzero().squeeze(1)
            out = out.index_add(0, idx, expert(x.index_select(0, idx)))
        return out


@pytest.mark.parametrize("mode", ["eager", "compiled", "timing_only"])
def test_an_expert_with_no_tokens_trains_under_profile(neuron, mode):
    torch.manual_seed(0)
    with torch.neuron.timing_only(mode == "timing_only"):
        expert = nn.Linear(16, 8).to(neuron)
        tokens = torch.randn(0, 16, device=neuron, requires_grad=True)     # the batch routed to it
    step = torch.compile(expert, backend="neuron") if mode == "compiled" else expert
    with wb.profile() as prof:
        step(tokens).sum().backward()
    names = set(prof.ops["name"])
    assert "aten::mm" in names or mode == "compiled"        # the weight gradient over no tokens
    assert prof.summary["total_time"] > 0 and not prof.meta.get("error")
    if mode != "timing_only":
        assert torch.equal(expert.weight.grad.cpu(), torch.zeros(8, 16))
        assert torch.equal(expert.bias.grad.cpu(), torch.zeros(8))


def test_moe_layer_with_an_idle_expert_matches_cpu(neuron):
    torch.manual_seed(0)
    model, x = TinyMoE(), torch.randn(6, 16)
    on_device = TinyMoE().to(neuron)
    on_device.load_state_dict(model.state_dict())
    model(x).sum().backward()
    with wb.profile() as prof:
        on_device(x.to(neuron)).sum().backward()
    assert prof.summary["total_time"] > 0
    for a, b in zip(model.parameters(), on_device.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad)


EMPTY_OPS = {
    "mm_empty_inner": lambda d: torch.ones(4, 0, device=d) @ torch.ones(0, 5, device=d),
    "bmm_empty_inner": lambda d: torch.bmm(torch.ones(2, 3, 0, device=d), torch.ones(2, 0, 4, device=d)),
    "addmm_empty_inner": lambda d: torch.addmm(torch.ones(5, device=d), torch.ones(4, 0, device=d),
                                               torch.ones(0, 5, device=d)),
    "linear_empty_batch": lambda d: F.linear(torch.ones(0, 6, device=d), torch.ones(3, 6, device=d)),
    "sum_empty_dim": lambda d: torch.ones(3, 0, device=d).sum(1),
    "mean_empty": lambda d: torch.ones(0, device=d).mean(),
    "mse_loss_empty": lambda d: F.mse_loss(torch.ones(0, device=d), torch.ones(0, device=d)),
    "pad_empty": lambda d: F.pad(torch.ones(1, 0, 3, device=d), (0, 0, 2, 1), value=7.0),
    "cat_with_empty": lambda d: torch.cat([torch.ones(0, 3, device=d), torch.ones(2, 3, device=d)]),
    "softmax_empty_rows": lambda d: torch.softmax(torch.ones(0, 8, device=d), -1),
    "layer_norm_empty_batch": lambda d: F.layer_norm(torch.ones(0, 8, device=d), (8,)),
    "embedding_empty_ids": lambda d: F.embedding(torch.zeros(0, dtype=torch.long, device=d), torch.ones(5, 4, device=d)),
    "conv_empty_batch": lambda d: F.conv2d(torch.ones(0, 2, 5, 5, device=d), torch.ones(3, 2, 3, 3, device=d)),
    "sdpa_empty_seq": lambda d: F.scaled_dot_product_attention(*(torch.ones(1, 2, 0, 8, device=d),) * 3),
}


@pytest.mark.parametrize("op", EMPTY_OPS.values(), ids=EMPTY_OPS.keys())
def test_ops_over_empty_dimensions_match_cpu_under_profile(neuron, op):
    with wb.profile() as prof:
        out = op(neuron)
    torch.testing.assert_close(out.cpu(), op("cpu"), equal_nan=True)
    assert len(prof.ops) and not prof.meta.get("error")
