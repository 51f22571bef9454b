"""DDP's runtime statistics on ``neuron``: the device's C++ hooks give DDP a timer for
PrivateUse1, so DDP collects its time stats there, as on CPU, instead of warning on every job
that it collects them only for CPU and CUDA (the unchanged-script test checks ranks' stderr)."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from backend.distributed import BACKEND_NAME

STATS = ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time")


def test_ddp_collects_its_time_stats_on_the_device(neuron):
    dist.init_process_group(BACKEND_NAME, store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = DDP(torch.nn.Linear(4, 4).to(neuron))
        for _ in range(2):
            model(torch.randn(2, 4, device=neuron)).sum().backward()
        data = model._get_ddp_logging_data()
    finally:
        dist.destroy_process_group()
    assert all(data.get(name, 0) > 0 for name in STATS), {name: data.get(name) for name in STATS}
