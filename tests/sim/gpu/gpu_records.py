"""Helpers for the GPU cost-model tests: descriptors and a config with round numbers."""
from __future__ import annotations

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.gpu import derive

__all__ = ["T", "rec", "ROUND"]


def T(*shape: int, dtype: str = "bfloat16") -> TensorDesc:
    return TensorDesc(tuple(shape), dtype)


def rec(name: str, inputs, outputs, **fields) -> OpRecord:
    return OpRecord(0, name, tuple(inputs), tuple(outputs), **fields)


# Round numbers so expected times can be worked out by hand:
#   per-SM tensor rate 4e12 / 4 SMs x 0.5 = 500 FLOP/ns; HBM 1e12 x 0.5 = 500 B/ns;
#   HBM latency 100 cycles at 1 GHz = 100 ns; launch 1,000 ns; one tile shape, 128x128, tile_k 64
#   bf16; L2: 1 MiB, 4,000 B/ns (1,000 B/ns per SM), 50 ns latency, kernels up to 512 KiB hit.
ROUND = derive(
    "h100", name="round", sm_count=4, clock_hz=1e9, bf16_tensor_flops_per_s=4e12,
    fp32_flops_per_s=1e12, hbm_bytes_per_s=1e12, max_compute_efficiency=0.5,
    max_hbm_efficiency=0.5, hbm_latency_cycles=100, launch_overhead_ns=1000.0,
    graph_launch_overhead_ns=250.0, tile_shapes=((128, 128),), tile_k_bytes=128,
    l2_bytes=2**20, l2_bytes_per_s=4e12, l2_latency_cycles=50, l2_resident_fraction=0.5,
    pcie_bytes_per_s=1e9,
)
