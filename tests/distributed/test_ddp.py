"""DDP on two neuron ranks trains exactly like DDP on two CPU gloo ranks."""
import pytest
import torch
import torch.nn.functional as F

from workbench.distributed import launch

pytestmark = pytest.mark.slow


def _train(rank, world, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)          # each rank its own batches
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 8, generator=data).to(device), torch.randn(4, 1, generator=data).to(device)
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_ddp_losses_equal_a_cpu_gloo_run():
    neuron = launch(_train, 2, "neuron", start_method="spawn")
    cpu = launch(_train, 2, "cpu", backend="gloo", start_method="spawn")
    for (n_losses, n_params), (c_losses, c_params) in zip(neuron, cpu):
        assert n_losses == c_losses
        for a, b in zip(n_params, c_params):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Gradients were averaged: both ranks end with the same weights.
    for a, b in zip(neuron[0][1], neuron[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
