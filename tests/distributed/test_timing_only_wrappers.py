"""DDP and FSDP2 wrap a timing-only model on one rank of a fake world: construction reads no
values, and a step shows the wrapper's collectives priced on the topology. A model with values
fed a timing-only batch steps too: its gradients, and the weights an update writes them into,
are left holding no values."""
import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import workbench as wb
from backend.device.timing_only import TimingOnlyError
from workbench.distributed import fake_world

WIDTH = 512


@pytest.fixture
def world_64(neuron):
    fake_world(64, topology="trn1")
    yield dist.group.WORLD
    dist.destroy_process_group()


def _model():
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 8)).to("neuron")


def _collectives(prof):
    return [op.name.removeprefix("collective::") for op in prof.trace.ops
            if op.name.startswith("collective::") and op.kind != "wait"]


def test_ddp_wraps_a_timing_only_model(world_64):
    with torch.neuron.timing_only():
        model = _model()
        with wb.profile() as construction:
            ddp = DistributedDataParallel(model)
        # The shape check's all-gather and rank 0's broadcast of the parameters, no value read.
        assert _collectives(construction) == ["all_gather", "broadcast"]
        with wb.profile() as prof:
            ddp(torch.randn(16, WIDTH, device="neuron")).sum().backward()
    assert _collectives(prof) == ["all_reduce"]                 # one bucket of the gradients
    with pytest.raises(TimingOnlyError):
        model[0].weight.grad.sum().item()


def test_fsdp2_shards_a_timing_only_model(world_64):
    with torch.neuron.timing_only():
        model = _model()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        assert model[0].weight.to_local().shape == (WIDTH // 64, WIDTH)
        with wb.profile() as prof:
            model(torch.randn(16, WIDTH, device="neuron")).sum().backward()
    kinds = _collectives(prof)
    assert kinds.count("all_gather") >= 2 and kinds.count("reduce_scatter") == 2


def test_ddp_in_a_fake_world_with_values_still_trains(world_64):
    model = _model()
    ddp = DistributedDataParallel(model)
    ddp(torch.randn(16, WIDTH, device="neuron")).sum().backward()
    assert model[0].weight.grad.shape == (WIDTH, WIDTH)


def test_ddp_with_real_weights_steps_on_a_timing_only_batch(world_64):
    model = _model()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with torch.neuron.timing_only():
        x = torch.randn(256, WIDTH, device="neuron")
    with wb.profile() as prof:
        ddp(x).sum().backward()            # DDP copies each gradient into its bucket (aten::mul)
        opt.step()
    assert _collectives(prof) == ["all_reduce"]
    for p in model.parameters():
        assert p.grad._inner.is_meta
        with pytest.raises(TimingOnlyError, match="writing a timing-only result"):
            p.sum().item()
