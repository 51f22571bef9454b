"""Simulator speed: wall time to simulate a GPT-2-small training step, and its scaling with work."""
from __future__ import annotations

import time

from backend.lowering import simulate
from benchmarks.op_streams import gpt2_training_step

__all__ = ["gpt2_sim_wall_s", "sim_scaling"]


def gpt2_sim_wall_s(target: str = "trn2") -> tuple[float, int, float]:
    """(wall seconds to simulate, ops, simulated ms) for one GPT-2-small training step."""
    records = gpt2_training_step()
    start = time.perf_counter()
    trace = simulate(records, target)
    return time.perf_counter() - start, len(records), trace.total_time_ns / 1e6


def sim_scaling(steps=(1, 2, 4), target: str = "trn2") -> list[tuple[int, int, float]]:
    """(steps, ops, wall s) simulating 1, 2, 4 back-to-back GPT-2 steps: cost must grow linearly."""
    records = gpt2_training_step()
    rows = []
    for n in steps:
        start = time.perf_counter()
        simulate(records * n, target)
        rows.append((n, len(records) * n, time.perf_counter() - start))
    return rows
