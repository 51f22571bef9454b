"""Simulator fidelity against published results (``make fidelity``), and simulator speed.

``kernels``: the NKI matmul tutorial's variants and a DMA; ``workloads``: whole-model op streams
and torch programs; ``table``: the one table (predicted, published, ratio, error band);
``speed``: how fast the simulator itself runs.
"""
from benchmarks.fidelity.table import Row, format_table, gpu_rows, neuron_rows

__all__ = ["Row", "neuron_rows", "gpu_rows", "format_table", "main"]


def main() -> None:
    from benchmarks.fidelity.__main__ import main as run
    run()
