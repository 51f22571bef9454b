"""An ordinary CUDA training script, written for a real GPU and used unmodified by the tests.

It takes the cuda branch when ``torch.cuda.is_available()`` and falls back to the CPU
otherwise, like most published training code; nothing in it knows about the workbench.
"""
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Dropout(0.1),
                         nn.Linear(64, 10))


def main(steps: int = 4, seed: int = 0, batch: int = 16) -> dict:
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model()
    model = model.cuda() if device == "cuda" else model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    if device == "cuda":
        log.info("training on %s", torch.cuda.get_device_name(0))
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()

    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    result = {
        "device": device,
        "losses": losses,
        "param_device": next(model.parameters()).device,
        "params": [p.detach().cpu() for p in model.parameters()],
    }
    if device == "cuda":
        end.record()
        torch.cuda.synchronize()
        result["elapsed_ms"] = start.elapsed_time(end)
        result["memory_allocated"] = torch.cuda.memory_allocated()
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        log.info("%d steps in %.3f ms, peak memory %d B", steps, result["elapsed_ms"],
                 result["max_memory_allocated"])
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
