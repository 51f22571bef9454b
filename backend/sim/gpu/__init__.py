"""Cost model of the CUDA-emulated device: GPU presets, tiled-GEMM and roofline kernel costs,
and a timeline that turns OpRecords into a Trace. Pure Python: never imports torch."""
from backend.sim.gpu.cost import (KernelCost, fused_cost, gemm_cost, matmul_unit, record_cost,
                                  stream_cost, transfer_ns, vector_compute_ns)
from backend.sim.gpu.presets import PRESETS, GpuConfig, a100, derive, get_gpu, gh200, h100, h200
from backend.sim.gpu.timeline import GPU_ENGINES, GpuSession
from backend.sim.gpu.shapes import gemm_shape
from backend.sim.gpu.tiling import GemmPlan, GemmShape, hbm_time_ns, plan_gemm

__all__ = [
    "GpuConfig", "a100", "h100", "h200", "gh200", "PRESETS", "get_gpu", "derive",
    "GemmShape", "GemmPlan", "plan_gemm", "hbm_time_ns", "gemm_shape",
    "KernelCost", "matmul_unit", "vector_compute_ns", "gemm_cost", "stream_cost",
    "record_cost", "fused_cost", "transfer_ns",
    "GpuSession", "GPU_ENGINES",
]
