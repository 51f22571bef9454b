"""A DDP script written for CUDA ranks (``init_process_group("nccl")``, ``model.cuda()``,
``DDP(model, device_ids=[rank])``) runs unchanged on emulated GPUs and trains exactly like the
same script on CPU gloo ranks."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import workbench as wb
from workbench.distributed import _free_port

pytestmark = pytest.mark.slow


def _script(rank, world_size, backend, device):
    """The training script; the CPU twin differs only in its backend and device."""
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if device == "cuda":
        model = model.cuda()
        ddp = DDP(model, device_ids=[rank])
    else:
        ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)          # each rank its own batches
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 8, generator=data), torch.randn(4, 1, generator=data)
        if device == "cuda":
            x, y = x.cuda(), y.cuda()
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.detach().cpu() for p in model.parameters()]
    dist.destroy_process_group()
    return losses, params, str(next(model.parameters()).device)


def _rank(rank, world_size, port, emulate, out_dir):
    # What torchrun sets for each rank.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    if emulate:
        wb.set_device("cuda", target="h100")
        with wb.profile(device="cuda", target="h100") as prof:
            result = _script(rank, world_size, "nccl", "cuda")
        lane = [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]
        result = (*result, len(lane), "collective" in prof.trace.engines)
    else:
        result = _script(rank, world_size, "gloo", "cpu")
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    # Skip interpreter teardown: a gloo group freed there while a worker thread still needs the
    # GIL has deadlocked once (see DeviceWork.get_future); the result is already saved.
    os._exit(0)


def _run(world_size, emulate, out_dir):
    out_dir.mkdir()
    mp.start_processes(_rank, args=(world_size, _free_port(), emulate, str(out_dir)), nprocs=world_size,
                       start_method="spawn")
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world_size)]


def test_cuda_ddp_script_on_emulated_gpus_equals_a_cpu_gloo_run(tmp_path):
    gpus = _run(2, True, tmp_path / "nccl")
    cpus = _run(2, False, tmp_path / "gloo")
    for (g_losses, g_params, *_), (c_losses, c_params, _) in zip(gpus, cpus):
        assert g_losses == c_losses
        for a, b in zip(g_params, c_params):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(gpus[0][1], gpus[1][1]):       # gradients were averaged over the ranks
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for rank, (_, _, device, collectives, lane) in enumerate(gpus):
        assert device == f"cuda:{rank}"             # each rank's own GPU, as device_ids=[rank] expects
        assert collectives >= 3 and lane            # DDP's all-reduces on the collective lane
