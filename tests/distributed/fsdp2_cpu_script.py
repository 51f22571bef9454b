"""A CPU-only FSDP2 torchrun script, as written for gloo: ``fully_shard`` with its default mesh
(the one ``torch.accelerator`` points at). Rank 0 prints one JSON line: the parameters' device
type and the losses."""
import json

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard


def main(steps: int = 3):
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    for layer in model[::2]:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for _ in range(steps):
        x, y = torch.randn(4, 8, generator=data), torch.randn(4, 1, generator=data)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    if dist.get_rank() == 0:
        device = next(model.parameters()).device.type
        print(json.dumps({"device": device, "losses": losses}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
