"""What profiling adds to host time: a GPT-2-small training step, and a tiny op.

- GPT-2 small (nanoGPT-style, 12 layers, d 768, batch 4, seq 128, SGD) on ``neuron`` with values:
  host seconds of a step profiled (``wb.profile``) over the same step unprofiled [aim: < 1.5x].
- A profiled ``x + 1`` on a 64x64 tensor: host us per op, profiled and not [aim: ~50 us profiled].
Run: python -m benchmarks.profile_overhead
"""
from __future__ import annotations

import time

import torch

import workbench as wb
from benchmarks.compile_bench import TinyGPT, train_step

__all__ = ["gpt2_profiled_ratio", "tiny_op_us", "main"]

GPT2_SMALL = dict(vocab=50257, d=768, heads=12, layers=12, seq=128)


def _best_s(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gpt2_profiled_ratio(batch: int = 4, repeat: int = 2) -> dict:
    """Best-of-``repeat`` host seconds of a GPT-2-small step on neuron, unprofiled and profiled."""
    torch.manual_seed(0)
    model = TinyGPT(**GPT2_SMALL).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    idx = torch.randint(0, GPT2_SMALL["vocab"], (batch, GPT2_SMALL["seq"]), device="neuron")
    step = lambda: train_step(model, opt, idx, idx)          # noqa: E731
    step()                                                   # warm-up: allocations, first-call paths

    def profiled():
        with wb.profile(target="trn2"):
            step()

    plain, prof = _best_s(step, repeat), _best_s(profiled, repeat)
    return {"unprofiled_s": plain, "profiled_s": prof, "ratio": prof / plain}


def tiny_op_us(ops: int = 2000) -> dict:
    """Host us per ``x + 1`` (64x64 fp32) on neuron, unprofiled and inside ``wb.profile``."""
    x = torch.randn(64, 64, device="neuron")

    def run():
        for _ in range(ops):
            x + 1

    run()
    plain = _best_s(run, 3)
    with wb.profile(target="trn2"):
        run()                                                # the first op of its kind is lowered here
        profiled = _best_s(run, 3)
    return {"unprofiled_us": plain / ops * 1e6, "profiled_us": profiled / ops * 1e6}


def main() -> None:
    g = gpt2_profiled_ratio()
    print(f"GPT-2 small step (batch 4, seq 128, with values) on neuron: unprofiled {g['unprofiled_s']:.2f} s, "
          f"profiled {g['profiled_s']:.2f} s = {g['ratio']:.2f}x  [aim: under 1.5x]")
    t = tiny_op_us()
    print(f"tiny op (x + 1, 64x64): {t['unprofiled_us']:.0f} us unprofiled, {t['profiled_us']:.0f} us profiled "
          f"per op  [aim: ~50 us profiled]")


if __name__ == "__main__":
    main()
