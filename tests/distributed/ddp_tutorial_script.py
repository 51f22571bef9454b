"""A torchrun script in the device-generic form of PyTorch's DDP tutorials (pytorch/examples
distributed/ddp-tutorial-series, FSDP2/example.py's setup): only ``import torch``, the device
from ``torch.accelerator`` (CPU without one), the backend from
``get_default_backend_for_device``. ``--backend NAME`` is the tutorial's older explicit form
(``init_process_group("neuron")``, then ``.to(local_rank)``). Rank 0 prints one JSON line:
the device, the backend and the losses."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def ddp_setup(backend: str | None):
    rank = int(os.environ["LOCAL_RANK"])
    if backend is not None:             # init_process_group("nccl"); torch.cuda.set_device(rank)
        dist.init_process_group(backend)
        torch.accelerator.set_device_index(rank)
        return torch.device(torch.accelerator.current_accelerator().type, rank)
    if torch.accelerator.is_available():
        device = torch.device(f"{torch.accelerator.current_accelerator()}:{rank}")
        torch.accelerator.set_device_index(rank)
        device_id = device
    else:
        device, device_id = torch.device("cpu"), None   # device_id takes accelerators only
    dist.init_process_group(backend=dist.get_default_backend_for_device(device), device_id=device_id)
    return device


def main(backend: str | None, steps: int = 4):
    device = ddp_setup(backend)
    torch.manual_seed(0)
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=None if device.type == "cpu" else [device.index])
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for _ in range(steps):
        source, targets = torch.randn(20, 10, generator=data), torch.randn(20, 5, generator=data)
        optimizer.zero_grad()
        loss = F.mse_loss(ddp_model(source.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    weights = [p.detach().cpu().sum().item() for p in model.parameters()]
    if dist.get_rank() == 0:
        print(json.dumps({"device": str(device), "backend": dist.get_backend(), "losses": losses,
                          "weights": weights}))
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default=None)
    main(parser.parse_args().backend)
