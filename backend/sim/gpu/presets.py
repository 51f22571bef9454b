"""GPU presets for the CUDA-emulated device: published hardware numbers plus model knobs.

Built on the same mechanism as the NeuronCore presets (``backend.sim.spec``): every field has a
unit, a help text and a source -- a row of ``shared/hardware.md``'s GPUs table unless it says
otherwise, or an ``ASSUMPTION`` with a plausible range (L2 bandwidth and latency, HBM
efficiency, ...). The tensor-core efficiency ceiling is read from the published MAMF
measurements (A100: 85.9%; H100/H200: GH200's 83.0%), not fitted. Peaks are dense (no 2:4 sparsity). Sizes quoted by vendors in decimal GB/MB
are kept decimal for HBM; on-chip sizes (L2, shared memory) are binary, as the CUDA programming
guide counts them. Look presets up with ``get_target("h100")`` (or :func:`get_gpu`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from backend.sim.presets import derive, get_target
from backend.sim.spec import ASSUMPTION, HardwareConfig, spec

__all__ = ["GpuConfig", "a100", "h100", "h200", "gh200", "PRESETS", "get_gpu", "derive"]

_SHEET = "shared/hardware.md GPUs table (NVIDIA datasheets; stas00/ml-engineering)"
_MIB = 2**20
_KIB = 2**10


@dataclass(frozen=True, slots=True)
class GpuConfig(HardwareConfig):
    """One GPU as the cost model sees it. Build variants with ``derive``."""

    kind = "gpu"
    name: str
    sm_count: int = spec(unit="SMs", source=_SHEET, help="streaming multiprocessors")
    clock_hz: float = spec(unit="Hz", source=f"{_SHEET}: clock the spec TFLOPS imply",
                           help="SM clock the published peaks are computed at")
    bf16_tensor_flops_per_s: float = spec(unit="FLOP/s", source=f"{_SHEET}: dense BF16/FP16 tensor",
                                          help="dense bf16/fp16 tensor-core peak")
    tf32_tensor_flops_per_s: float = spec(unit="FLOP/s", source=f"{_SHEET}: dense TF32 tensor",
                                          help="dense tf32 tensor-core peak (fp32 matmuls with allow_tf32)")
    fp8_tensor_flops_per_s: float | None = spec(
        unit="FLOP/s", source=f"{_SHEET}: FP8 tensor",
        help="fp8 tensor-core peak; None where the chip has none (A100): FP8 GEMMs then run at "
             "the bf16 rate, as an upcast kernel would")
    fp32_flops_per_s: float = spec(unit="FLOP/s", source=f"{_SHEET}: FP32 (non-tensor, CUDA cores)",
                                   help="fp32 peak of the CUDA cores (SIMT)")
    fp64_flops_per_s: float = spec(unit="FLOP/s", source="NVIDIA A100/H100/H200 datasheets: FP64 "
                                                          "(non-tensor); not in hardware.md",
                                   help="fp64 peak of the CUDA cores")
    hbm_bytes: float = spec(unit="B", source=f"{_SHEET}: HBM capacity (decimal GB as printed)",
                            help="device memory capacity")
    hbm_bytes_per_s: float = spec(unit="B/s", source=f"{_SHEET}: HBM bandwidth", help="device memory bandwidth")
    l2_bytes: int = spec(unit="B", source=f"{_SHEET}: L2", help="L2 cache; GEMM operands that fit are read once")
    l2_bytes_per_s: float = spec(
        unit="B/s", plausible=(5.5e12, 12e12),
        source=ASSUMPTION + ": A100: 5,120 B/clk x 1.41 GHz = 7.2 TB/s, the L2 read bandwidth of "
               "NVIDIA's A100 whitepaper; H100: ~10 TB/s, between chipsandcheese's measurement "
               "on the 114-SM H100 PCIe ('Nvidia's H100: Funny L2, and Tons of Bandwidth', 2023) "
               "and the ~12 TB/s a third-party H100 SXM profile lists (mikamirai.com, 'GPU "
               "Memory Bandwidth', 2026)",
        help="L2 -> SM bandwidth: feeds GEMM tiles their operands, and serves small kernels "
             "whose data is still in L2")
    smem_bytes_per_sm: int = spec(unit="B", source="CUDA programming guide via hardware.md: max smem per SM",
                                  help="largest shared memory one SM can give its blocks")
    pcie_bytes_per_s: float = spec(
        unit="B/s", plausible=(25e9, 64e9),
        source=ASSUMPTION + ": PCIe spec rate per direction, x16 lanes (gen4 16 GT/s -> 32 GB/s, gen5 "
               "32 GT/s -> 64 GB/s); datasheets print the bidirectional 64 / 128 GB/s. Pinned copies "
               "measure ~80-90% of this; pageable ones less",
        help="host<->device copy rate per direction")
    launch_overhead_ns: float = spec(
        3300.0, unit="ns", help="host time to launch one small kernel eagerly",
        source="hardware.md: ~3.3 us per small kernel launched eagerly (CUDA.jl graphs docs; "
               "Accel-Sim's A100 config uses 5,000 cycles = 3.5 us at 1.41 GHz)")
    graph_launch_overhead_ns: float = spec(
        900.0, unit="ns", help="time per kernel replayed from a CUDA graph",
        source="hardware.md: ~0.9 us per kernel replayed from a CUDA graph (CUDA.jl graphs docs)")
    hbm_latency_cycles: int = spec(
        600, unit="cycles", plausible=(400, 900), help="SM cycles from load issue to first HBM data",
        source=ASSUMPTION + ": ~600 SM cycles, the order pointer-chasing microbenchmarks report for "
               "A100/H100; not in hardware.md")
    l2_latency_cycles: int = spec(
        260, unit="cycles", plausible=(200, 300), help="SM cycles from load issue to first L2 data",
        source=ASSUMPTION + ": ~200-300 SM cycles, the order pointer-chasing microbenchmarks "
               "(chipsandcheese's A100/H100 articles) report; not in hardware.md")
    l2_resident_fraction: float = spec(
        0.5, unit="of L2", plausible=(0.25, 1.0),
        help="a kernel whose reads + writes fit in this share of l2_bytes is served from L2: "
             "in an eager stream its inputs are the outputs its predecessors just wrote",
        source=ASSUMPTION + ": half, because A100/H100 split L2 into two partitions and "
               "other live data (weights, the caller's tensors) shares it")
    # -- model knobs (not hardware numbers) -------------------------------------------------
    tile_shapes: tuple[tuple[int, int], ...] = spec(
        ((128, 256), (256, 128), (128, 128), (64, 256), (256, 64), (64, 128), (128, 64), (64, 64)),
        unit="", help="CTA tiles (rows, columns) the GEMM heuristic chooses among, largest first "
                      "(ties go to the earlier one)",
        source="CUTLASS python/cutlass_library/generator.py, GenerateSM80_TensorOp_16816: the "
               "bf16/fp16 tensor-op CTA tiles 256x128, 128x256, 256x64, 64x256, 128x128, 128x64, "
               "64x128, 64x64; a heuristic picks one per shape, as cuBLAS does among its kernels")
    tile_k_bytes: int = spec(128, unit="B", plausible=(32, 128),
                             help="bytes of each operand row one K step moves (tile_k = 64 bf16, "
                                  "32 fp32/tf32, 128 fp8 elements)",
                             source=ASSUMPTION + ": the 128 B shared-memory swizzle width")
    max_compute_efficiency: float = spec(
        0.830, unit="of peak",
        help="fraction of the matrix unit's peak a tuned GEMM mainloop sustains once wave, "
             "padding, L2 and ramp losses are gone. The MAMF sweep (maximum achievable matmul "
             "FLOPs) measures the best GEMM over thousands of shapes, the one where those "
             "losses nearly vanish, so its fraction of peak is this ceiling; the tile model "
             "adds the losses back per shape. CUDA-core (SIMT) kernels are assumed to reach the "
             "same fraction of their own peak (no SIMT measurement is in hardware.md)",
        source="hardware.md published results: GH200 bf16 MAMF 821.0 TFLOP/s = 83.0% of 989 "
               "(ml-engineering MAMF table, CUDA 12.5); the same GH100 die and SMs as H100/H200")
    max_hbm_efficiency: float = spec(
        0.9, unit="of peak", plausible=(0.8, 0.95),
        help="best fraction of HBM bandwidth a large streaming copy reaches; small ones are "
             "dominated by hbm_latency_cycles",
        source=ASSUMPTION + ": STREAM-style copy kernels reach ~90% of HBM peak")
    allow_tf32: bool = spec(
        False, unit="", help="run fp32 matmuls on TF32 tensor cores instead of fp32 SIMT GEMMs",
        source="PyTorch: mirrors torch.backends.cuda.matmul.allow_tf32, whose default is False")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ValueError(f"GpuConfig.{f.name} must be positive, got {value!r}")
        for knob in ("max_compute_efficiency", "max_hbm_efficiency", "l2_resident_fraction"):
            if getattr(self, knob) > 1:
                raise ValueError(f"GpuConfig.{knob} is a fraction; got {getattr(self, knob)}")
        if not self.tile_shapes or any(len(tile) != 2 or min(tile) < 1 for tile in self.tile_shapes):
            raise ValueError(f"GpuConfig.tile_shapes must be (rows, columns) pairs >= 1; "
                             f"got {self.tile_shapes!r}")

    @property
    def hbm_latency_ns(self) -> float:
        return self.hbm_latency_cycles / self.clock_hz * 1e9

    @property
    def l2_latency_ns(self) -> float:
        return self.l2_latency_cycles / self.clock_hz * 1e9


# Laid out like hardware.md's GPUs table, one row per field: (A100 SXM 80GB, H100 SXM).
_HARDWARE_TABLE: dict[str, tuple] = {
    "sm_count": (108, 132),
    "clock_hz": (1.41e9, 1.83e9),           # H100: spec TFLOPS imply ~1.83 GHz; max boost 1.98
    "bf16_tensor_flops_per_s": (312e12, 989e12),
    "tf32_tensor_flops_per_s": (156e12, 494.7e12),
    "fp8_tensor_flops_per_s": (None, 1979e12),
    "fp32_flops_per_s": (19.5e12, 67e12),
    "fp64_flops_per_s": (9.7e12, 34e12),
    "hbm_bytes": (80e9, 80e9),
    "hbm_bytes_per_s": (2039e9, 3350e9),
    "l2_bytes": (40 * _MIB, 50 * _MIB),
    "smem_bytes_per_sm": (164 * _KIB, 228 * _KIB),
    "pcie_bytes_per_s": (32e9, 64e9),       # host link: A100 SXM4 PCIe gen4 x16, H100 SXM5 gen5 x16
    "l2_bytes_per_s": (5120 * 1.41e9, 10e12),
    "max_compute_efficiency": (0.859, 0.830),
}
_A100_SOURCES = {"max_compute_efficiency": "hardware.md published results: A100 SXM bf16 MAMF "
                                           "267.9 TFLOP/s = 85.9% of 312 (ml-engineering MAMF "
                                           "table, CUDA 12.1)"}
a100 = GpuConfig(name="a100", sources=_A100_SOURCES,
                 **{key: row[0] for key, row in _HARDWARE_TABLE.items()})
h100 = GpuConfig(name="h100", **{key: row[1] for key, row in _HARDWARE_TABLE.items()})

# H200 is an H100 die with HBM3e: same SMs, clocks and peaks, more and faster memory.
h200 = replace(h100, name="h200", hbm_bytes=141e9, hbm_bytes_per_s=4800e9)

PRESETS: dict[str, GpuConfig] = {cfg.name: cfg for cfg in (a100, h100, h200)}

# GH200's GPU is the H100 die (132 SMs, 989 TFLOP/s dense bf16) with 96 GB HBM3 at 4 TB/s and a
# 900 GB/s NVLink-C2C host link. Kept out of PRESETS: it is here to check the model against the
# GH200 MAMF measurement, not as a device to emulate.
_GH200_SHEET = "NVIDIA GH200 Grace Hopper Superchip datasheet"
gh200 = replace(h100, name="gh200", hbm_bytes=96e9, hbm_bytes_per_s=4000e9, pcie_bytes_per_s=450e9, sources={
    "hbm_bytes": f"{_GH200_SHEET}: 96 GB HBM3",
    "hbm_bytes_per_s": f"{_GH200_SHEET}: 4 TB/s HBM3",
    "pcie_bytes_per_s": f"{_GH200_SHEET}: NVLink-C2C 900 GB/s bidirectional = 450 GB/s per direction"})


def get_gpu(name: str | GpuConfig | None = None) -> GpuConfig:
    """The GPU preset called ``name`` (case-insensitive; None: the default); configs pass through."""
    return get_target(name, kind="gpu")
