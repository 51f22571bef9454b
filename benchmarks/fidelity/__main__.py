"""``python -m benchmarks.fidelity``: print the fidelity table and write it to docs/ (fidelity.md and
.json), then the simulator's speed."""
from __future__ import annotations

import argparse
import logging
import time

from benchmarks.fidelity.report import write_report
from benchmarks.fidelity.speed import gpt2_sim_wall_s, sim_scaling
from benchmarks.fidelity.table import all_rows, format_table


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=__doc__.split("\n\n")[0]
                            + " Takes about 8 minutes on 2 cores; `make fidelity-check` compares "
                            "instead of writing.").parse_args(argv)
    logging.basicConfig(level=logging.ERROR)        # range ends may trip lowering capacity warnings
    start = time.perf_counter()
    rows = all_rows()
    print(format_table(rows))
    md, js = write_report(rows)
    print(f"\n(table with bands computed in {time.perf_counter() - start:.0f} s; written to {md} and {js.name})")
    wall, ops, sim_ms = gpt2_sim_wall_s()
    print(f"GPT-2 small training step on trn2: {ops} eager ops simulated in {wall:.2f} s wall "
          f"({sim_ms:.1f} ms simulated)")
    scaling = sim_scaling()
    per_op = [wall / ops * 1e6 for _, ops, wall in scaling]
    print("simulator cost vs work: " + ", ".join(f"{n} step(s) {ops} ops {wall:.2f} s" for n, ops, wall in scaling)
          + f"; us per op {per_op[0]:.0f} -> {per_op[-1]:.0f} ({per_op[-1] / per_op[0]:.2f}x; 1.00x = linear, below: repeated ops reuse cached schedules)")


if __name__ == "__main__":
    main()
