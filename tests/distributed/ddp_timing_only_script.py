"""One rank of a two-rank torchrun job (``init_process_group("neuron")``): DDP as the PyTorch
tutorials write it, on a model built in timing-only mode, and on a model with values fed a
timing-only batch. Rank 0 prints one JSON line: what each step's profile saw and what values
the tensors hold."""
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import workbench as wb
from backend.device.timing_only import TimingOnlyError

WIDTH = 512


def _model():
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))


def _collectives(prof):
    return sorted({op.name.removeprefix("collective::") for op in prof.trace.ops
                   if op.name.startswith("collective::") and op.kind != "wait"})


def _step(ddp, optimizer, x):
    """One training step under a profile: its collectives and whether the loss can be read."""
    with wb.profile() as prof:
        optimizer.zero_grad()
        loss = F.mse_loss(ddp(x), torch.zeros_like(x))
        loss.backward()
        optimizer.step()
    try:
        loss.item()
        readable = True
    except TimingOnlyError:
        readable = False
    return {"collectives": _collectives(prof), "loss_readable": readable, "total_time": prof.summary["total_time"]}


def _has_values(t) -> bool:
    try:
        t.sum().item()
        return True
    except TimingOnlyError:
        return False


def main() -> None:
    dist.init_process_group("neuron")
    rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(rank)
    torch.manual_seed(0)
    result = {}

    with torch.device("neuron"), torch.neuron.timing_only():     # data-free model and batch
        ddp = DDP(_model())
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x = torch.randn(256, WIDTH)
    result["timing_only_model"] = _step(ddp, optimizer, x)
    result["timing_only_model"]["weights_have_values"] = [_has_values(p) for p in ddp.parameters()]

    model = _model().to("neuron")                                 # weights with values
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with torch.neuron.timing_only():
        x = torch.randn(256, WIDTH, device="neuron")
    result["real_weights"] = _step(ddp, optimizer, x)
    result["real_weights"]["weights_have_values"] = [_has_values(p) for p in model.parameters()]
    result["real_weights"]["grads_have_values"] = [_has_values(p.grad) for p in model.parameters()]
    if rank == 0:
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
