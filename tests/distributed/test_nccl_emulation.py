"""``init_process_group("nccl")`` under CUDA emulation: CUDA-written jobs run unchanged, their
collectives priced on the emulated GPU's node (NVLink inside, InfiniBand between nodes)."""
import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

import workbench as wb
from backend.device import cuda_emulation
from backend.distributed import NeuronOptions, NeuronProcessGroup, create_nccl_process_group
from backend.sim.collectives import collective_cost


@pytest.fixture
def h100():
    cuda_emulation.enable("h100")
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    cuda_emulation.disable()


def _fake_nccl_world(world_size: int) -> None:
    dist.init_process_group("nccl", store=FakeStore(), rank=0, world_size=world_size,
                            pg_options=NeuronOptions(fake=True))


def test_all_reduce_on_an_emulated_h100_is_priced_on_dgx_h100_nodes(h100):
    _fake_nccl_world(16)                                   # two DGX H100 nodes of 8 GPUs
    assert isinstance(dist.group.WORLD, NeuronProcessGroup) and dist.get_backend() == "nccl"
    grads = torch.ones(2**24, device="cuda")               # 64 MiB of fp32 gradients
    with wb.profile(device="cuda", target="h100") as prof:
        dist.all_reduce(grads)
    lane = [op for op in prof.trace.ops if op.name == "collective::all_reduce"]
    # Hierarchical: NVLink ring reduce-scatter over 8 GPUs (2 us a step, 450 GB/s a direction),
    # InfiniBand ring all-reduce of the 1/8 shard over 2 nodes (10 us a step, 50 GB/s), NVLink
    # all-gather; bytes / (GB/s) is ns.
    nvlink = 7 * 2000 + 7 / 8 * 2**26 / 450
    infiniband = 2 * (1 * 10_000 + 1 / 2 * 2**23 / 50)
    expected = 2 * nvlink + infiniband
    assert collective_cost("all_reduce", 2**26, 16, "dgx-h100").time_ns == pytest.approx(expected)
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(expected)
    assert "collective" in prof.trace.engines                  # the GPU profile's collective lane
    assert any(e.engine == "collective" for e in prof.trace.events)


def test_the_node_follows_the_emulated_gpu():
    with cuda_emulation.emulate_cuda("a100"):
        _fake_nccl_world(8)
        try:
            assert dist.group.WORLD.topology == "dgx-a100"
        finally:
            dist.destroy_process_group()


def test_nccl_is_pytorchs_own_again_once_emulation_is_off():
    with cuda_emulation.emulate_cuda("h100"):
        assert dist.Backend("nccl").upper() in dist.Backend._plugins
    assert dist.Backend.NCCL == "nccl" and "NCCL" not in dist.Backend._plugins
    assert dist.Backend.backend_type_map["nccl"] == dist.ProcessGroup.BackendType.NCCL
    with pytest.raises(RuntimeError, match="doesn't have NCCL built in"):
        _fake_nccl_world(2)


def test_the_nccl_creator_refuses_clearly_while_emulation_is_off():
    assert not cuda_emulation.is_enabled()
    with pytest.raises(RuntimeError, match=r'wb.set_device\("cuda"\) or %neuron_device cuda'):
        create_nccl_process_group(None, None)


def test_a_rank_emulates_the_gpu_of_its_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")                  # what torchrun sets for the second rank
    with cuda_emulation.emulate_cuda("h100"):
        assert torch.cuda.device_count() == 2
        assert torch.ones(2).cuda().device == torch.device("cuda", 1)
        assert torch.nn.Linear(2, 1).to("cuda:1").weight.device == torch.device("cuda", 1)
