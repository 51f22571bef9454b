"""Helpers for the TPU cost-model tests: descriptors and a config with round numbers."""
from __future__ import annotations

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.presets import derive

__all__ = ["T", "rec", "ROUND"]


# Round numbers so expected times can be worked out by hand:
#   one 128x128 MXU; MXU 1e12 x 0.5 = 500 FLOP/ns (int8 1,000); VPU 125 lanes x 8 sublanes x
#   1 op x 1 GHz = 1,000 FLOP/ns; HBM 1e12 x 0.5 = 500 B/ns; 100 ns per fusion; host link 1 B/ns.
ROUND = derive(
    "v6e", name="round", tensorcores_per_chip=1, mxus_per_core=1, mxu_size=128, clock_hz=1e9,
    bf16_flops_per_s=1e12, int8_ops_per_s=2e12, max_mxu_efficiency=0.5, vpu_lanes=125,
    vpu_sublanes=8, vpu_ops_per_cycle=1, hbm_bytes_per_s=1e12, max_hbm_efficiency=0.5,
    fusion_overhead_ns=100.0, fp32_matmul_passes=6, host_link_bytes_per_s=1e9,
)


def T(*shape: int, dtype: str = "bfloat16") -> TensorDesc:
    return TensorDesc(tuple(shape), dtype)


def rec(name: str, inputs, outputs, **fields) -> OpRecord:
    return OpRecord(0, name, tuple(inputs), tuple(outputs), **fields)
