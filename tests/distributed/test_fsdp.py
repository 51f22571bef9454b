"""FSDP2 (``fully_shard``) on the ``neuron`` device: a one-rank gloo-backed world trains exactly
like the same model on CPU (freeing and re-allocating unsharded parameters through
``untyped_storage().resize_``), the device mesh is built over the ``neuron`` process group, and
one rank of a fake world prices FSDP2's all-gathers and reduce-scatters."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import workbench as wb
from backend.distributed import BACKEND_NAME
from workbench.distributed import fake_world


@pytest.fixture
def world_of_one():
    dist.init_process_group(BACKEND_NAME, store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                               torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _train(model, device, steps: int = 3) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(4, 8, generator=data).to(device), torch.randn(4, 1, generator=data).to(device)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_the_device_mesh_names_the_neuron_group(world_of_one, neuron):
    mesh = init_device_mesh(BACKEND_NAME, (1,))
    assert mesh.get_group().group_name == world_of_one.group_name


def test_fully_shard_trains_like_cpu(world_of_one, neuron):
    cpu = _mlp()
    sharded = _mlp().to(neuron)
    mesh = init_device_mesh(BACKEND_NAME, (1,))
    for layer in sharded[::2]:
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)

    losses = _train(sharded, neuron)
    assert losses == _train(cpu, "cpu")
    for ours, reference in zip(sharded.parameters(), cpu.parameters()):
        torch.testing.assert_close(ours.full_tensor().cpu(), reference.detach(), rtol=0, atol=0)


def test_resharding_frees_the_unsharded_parameters(world_of_one, neuron):
    model = _mlp().to(neuron)
    fully_shard(model, mesh=init_device_mesh(BACKEND_NAME, (1,)))
    sharded = torch.neuron.memory_allocated()
    model.unshard()
    unsharded = torch.neuron.memory_allocated()
    model.reshard()     # untyped_storage().resize_(0) of the all-gather outputs
    assert unsharded > sharded and torch.neuron.memory_allocated() == sharded
    model.unshard()     # resize_(nbytes) again, refilled from the shards
    x = torch.randn(4, 8)
    torch.testing.assert_close(model(x.to(neuron)).cpu(), _mlp()(x), rtol=0, atol=0)


def test_fully_shard_on_one_rank_of_a_fake_world_prices_its_collectives(neuron):
    fake_world(8)
    try:
        model = _mlp().to(neuron)
        fully_shard(model, mesh=init_device_mesh(BACKEND_NAME, (8,)))
        with wb.profile() as prof:
            model(torch.randn(4, 8, device=neuron)).sum().backward()
    finally:
        dist.destroy_process_group()
    names = {op.name for op in prof.trace.ops}
    assert {"collective::all_gather", "collective::reduce_scatter"} <= names
