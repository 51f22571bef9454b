"""One rank of the two-rank job ``test_hta_ranks`` starts with torchrun: a DDP training step as
the PyTorch tutorials write it, traced by torch.profiler (with a step schedule) and by
wb.profile (steps marked as torch.profiler marks them), each rank writing ``<out>/torch/rank<r>.json`` and ``<out>/wb/rank<r>.json``."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

import workbench as wb


def main(out: Path) -> None:
    dist.init_process_group("neuron")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 256)).to("neuron"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 256, device="neuron")

    def train_step():
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    for kind in ("torch", "wb"):
        (out / kind).mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out / "torch" / f"rank{rank}.json"))) as prof:
        for _ in range(4):
            train_step()
            prof.step()
    with wb.profile() as simulated:
        for _ in range(4):
            train_step()
            simulated.step()
    simulated.export_chrome_trace(out / "wb" / f"rank{rank}.json")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
