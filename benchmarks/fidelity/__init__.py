"""Simulator fidelity against published results (``make fidelity``), and simulator speed.

``cases``: published results as data (value, citation, configuration) with builders that run
real ``nn.Module``\\ s (``models``: training steps of HF BERT and the shared ``wb.models.Llama``;
``tpu``: the MaxText rows); ``kernels``: the NKI matmul tutorial's variants and a DMA;
``workloads``: the Mamba layer's torch reference; ``table``: the one table (predicted, published,
ratio, error band);
``speed``: how fast the simulator itself runs.
"""
from benchmarks.fidelity.table import Row, format_table, gpu_rows, neuron_rows

__all__ = ["Row", "neuron_rows", "gpu_rows", "format_table", "main"]


def main() -> None:
    from benchmarks.fidelity.__main__ import main as run
    run()
