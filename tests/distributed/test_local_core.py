"""A rank of a job uses the NeuronCore of its local rank, as CUDA jobs use ``cuda:<LOCAL_RANK>``."""
import torch
import torch.distributed as dist

from backend.distributed import bind_local_core


def test_the_neuron_group_binds_the_rank_to_its_local_core(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")                     # what torchrun sets for the fourth rank
    torch.neuron.set_target("trn2")
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert torch.neuron.current_device() == 3
        t = torch.ones(4, device="neuron")
        assert t.device == torch.device("neuron", 3)
        dist.all_reduce(t)
        assert t.device == torch.device("neuron", 3) and t.tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()
        torch.neuron.set_device(0)


def test_local_ranks_beyond_the_chip_wrap_around_its_cores(monkeypatch):
    torch.neuron.set_target("trn2")
    try:
        monkeypatch.setenv("LOCAL_RANK", "9")
        assert bind_local_core() == 1 == torch.neuron.current_device()    # 9 % 8 cores
        torch.neuron.set_logical_nc_config(2)
        monkeypatch.setenv("LOCAL_RANK", "6")
        assert bind_local_core() == 2 == torch.neuron.current_device()    # 6 % 4 logical cores
        monkeypatch.delenv("LOCAL_RANK")
        assert bind_local_core() is None                                  # outside a job: unchanged
    finally:
        torch.neuron.set_logical_nc_config(1)
        torch.neuron.set_device(0)
