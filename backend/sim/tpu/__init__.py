"""Cost model of simulated TPU targets (Cloud TPU v5e, v5p, v6e): cited presets, MXU/VPU/HBM
fusion costs and a timeline that turns OpRecords into a Trace as the compiled XLA program would
run. Pure Python: never imports torch."""
from backend.sim.tpu.cost import (FusionCost, fused_cost, hbm_ns, matmul_ns, mxu_padded_flops, mxu_rate,
                                  record_cost, transfer_ns, vpu_ns)
from backend.sim.tpu.fusion import PendingFusion, starts_fusion
from backend.sim.tpu.presets import PRESETS, TpuConfig, get_tpu, v5e, v5p, v6e
from backend.sim.tpu.timeline import COMPILED_PATH_NOTE, TPU_ENGINES, TpuSession

__all__ = [
    "TpuConfig", "v5e", "v5p", "v6e", "PRESETS", "get_tpu",
    "FusionCost", "mxu_rate", "mxu_padded_flops", "matmul_ns", "vpu_ns", "hbm_ns",
    "fused_cost", "record_cost", "transfer_ns",
    "PendingFusion", "starts_fusion",
    "TpuSession", "TPU_ENGINES", "COMPILED_PATH_NOTE",
]
