"""``python -m benchmarks.fidelity``: print the fidelity table, then the simulator's speed."""
from __future__ import annotations

import logging
import time

from benchmarks.fidelity.speed import gpt2_sim_wall_s, sim_scaling
from benchmarks.fidelity.table import format_table, gpu_rows, neuron_rows
from benchmarks.fidelity.tpu import tpu_rows


def main() -> None:
    logging.basicConfig(level=logging.ERROR)        # range ends may trip lowering capacity warnings
    start = time.perf_counter()
    print(format_table(neuron_rows() + gpu_rows() + tpu_rows()))
    print(f"\n(table with bands computed in {time.perf_counter() - start:.0f} s)")
    wall, ops, sim_ms = gpt2_sim_wall_s()
    print(f"GPT-2 small training step on trn2: {ops} eager ops simulated in {wall:.2f} s wall "
          f"({sim_ms:.1f} ms simulated)")
    rows = sim_scaling()
    per_op = [wall / ops * 1e6 for _, ops, wall in rows]
    print("simulator cost vs work: " + ", ".join(f"{n} step(s) {ops} ops {wall:.2f} s" for n, ops, wall in rows)
          + f"; us per op {per_op[0]:.0f} -> {per_op[-1]:.0f} ({per_op[-1] / per_op[0]:.2f}x; 1.00x = linear, below: repeated ops reuse cached schedules)")


if __name__ == "__main__":
    main()
