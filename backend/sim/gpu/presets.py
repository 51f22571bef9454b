"""GPU presets for the CUDA-emulated device: published hardware numbers plus model knobs.

Hardware fields carry their source in ``field(metadata={"source": ...})``; the sources are the
rows of ``shared/hardware.md`` (GPUs table) unless a field says otherwise. Model knobs (tile
shape, efficiency ceilings) are assumptions of the cost model and say why they have their value.
Peaks are dense (no 2:4 sparsity). Sizes quoted by vendors in decimal GB/MB are kept decimal for
HBM; on-chip sizes (L2, shared memory) are binary, as the CUDA programming guide counts them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

__all__ = ["GpuConfig", "a100", "h100", "h200", "PRESETS", "get_gpu", "derive", "field_source"]

_SHEET = "shared/hardware.md GPUs table (NVIDIA datasheets; stas00/ml-engineering)"
_MIB = 2**20
_KIB = 2**10


def _src(source: str, default=None):
    """A dataclass field whose metadata names where its number comes from."""
    if default is None:
        return field(metadata={"source": source})
    return field(default=default, metadata={"source": source})


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """One GPU as the cost model sees it. Build variants with :func:`derive`."""

    name: str
    sm_count: int = _src(_SHEET)
    clock_hz: float = _src(f"{_SHEET}: clock the spec TFLOPS imply")
    bf16_tensor_flops_per_s: float = _src(f"{_SHEET}: dense BF16/FP16 tensor")
    tf32_tensor_flops_per_s: float = _src(f"{_SHEET}: dense TF32 tensor")
    # None where the chip has no FP8 tensor cores (A100): FP8 GEMMs then run at the BF16 rate,
    # as an upcast kernel would.
    fp8_tensor_flops_per_s: float | None = _src(f"{_SHEET}: FP8 tensor")
    fp32_flops_per_s: float = _src(f"{_SHEET}: FP32 (non-tensor, CUDA cores)")
    fp64_flops_per_s: float = _src("NVIDIA A100/H100/H200 datasheets: FP64 (non-tensor); "
                                   "not in hardware.md")
    hbm_bytes: float = _src(f"{_SHEET}: HBM capacity (decimal GB as printed)")
    hbm_bytes_per_s: float = _src(f"{_SHEET}: HBM bandwidth")
    l2_bytes: int = _src(f"{_SHEET}: L2")
    smem_bytes_per_sm: int = _src("CUDA programming guide via hardware.md: max smem per SM")
    pcie_bytes_per_s: float = _src(
        "assumption: PCIe spec rate per direction, x16 lanes (gen4 16 GT/s -> 32 GB/s, gen5 "
        "32 GT/s -> 64 GB/s); datasheets print the bidirectional 64 / 128 GB/s. Pinned copies "
        "measure ~80-90% of this; pageable ones less")
    launch_overhead_ns: float = _src(
        "hardware.md: ~3.3 us per small kernel launched eagerly (CUDA.jl graphs docs; "
        "Accel-Sim's A100 config uses 5,000 cycles = 3.5 us at 1.41 GHz)", 3300.0)
    graph_launch_overhead_ns: float = _src(
        "hardware.md: ~0.9 us per kernel replayed from a CUDA graph (CUDA.jl graphs docs)", 900.0)
    hbm_latency_cycles: int = _src(
        "assumption: ~600 SM cycles from load issue to first HBM data, the order "
        "pointer-chasing microbenchmarks report for A100/H100; not in hardware.md", 600)
    # -- model knobs (not hardware numbers) -------------------------------------------------
    # CTA tile of the GEMM mainloop: 128x256 is CUTLASS's large-problem tile for sm80 and sm90
    # bf16 GEMMs. One K step moves 128 bytes of each operand row (the 128 B smem swizzle), so
    # tile_k = 64 bf16, 32 fp32/tf32, 128 fp8 elements.
    tile_m: int = 128
    tile_n: int = 256
    tile_k_bytes: int = 128
    # Best fraction of peak a tuned kernel sustains once wave, padding and ramp losses are
    # gone: with those losses on top, large bf16 GEMMs land at ~76% of peak (~750 TFLOP/s on
    # H100, what cuBLAS measures), next to the 75% that PyTorch's runtime_estimator assumes.
    max_compute_efficiency: float = 0.8
    # Large streaming copies reach ~90% of HBM peak (STREAM-style copy kernels); small ones
    # are dominated by hbm_latency_cycles.
    max_hbm_efficiency: float = 0.9
    # Mirrors torch.backends.cuda.matmul.allow_tf32, whose default is False: fp32 matmuls then
    # run as full-fp32 SIMT GEMMs on CUDA cores, not on TF32 tensor cores.
    allow_tf32: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ValueError(f"GpuConfig.{f.name} must be positive, got {value!r}")
        for knob in ("max_compute_efficiency", "max_hbm_efficiency"):
            if getattr(self, knob) > 1:
                raise ValueError(f"GpuConfig.{knob} is a fraction of peak; got {getattr(self, knob)}")

    @property
    def hbm_latency_ns(self) -> float:
        return self.hbm_latency_cycles / self.clock_hz * 1e9


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
}
a100 = GpuConfig(name="a100", **{key: row[0] for key, row in _HARDWARE_TABLE.items()})
h100 = GpuConfig(name="h100", **{key: row[1] for key, row in _HARDWARE_TABLE.items()})

# H200 is an H100 die with HBM3e: same SMs, clocks and peaks, more and faster memory.
h200 = replace(h100, name="h200", hbm_bytes=141e9, hbm_bytes_per_s=4800e9)

PRESETS: dict[str, GpuConfig] = {cfg.name: cfg for cfg in (a100, h100, h200)}


def get_gpu(name: str | GpuConfig) -> GpuConfig:
    """The preset called ``name`` (case-insensitive); a GpuConfig passes through unchanged."""
    if isinstance(name, GpuConfig):
        return name
    try:
        return PRESETS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown GPU preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def derive(base: str | GpuConfig, **overrides) -> GpuConfig:
    """A copy of ``base`` with some fields changed, e.g. ``derive("h100", hbm_bytes_per_s=4e12)``.

    Unless ``name`` is given, the result is named after the base and the fields changed
    (``"h100+hbm_bytes_per_s"``) so traces of a variant never pass for the stock part.
    """
    base = get_gpu(base)
    known = {f.name for f in fields(GpuConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown GpuConfig fields {unknown}; known fields: {sorted(known)}")
    if "name" not in overrides and overrides:
        overrides["name"] = f"{base.name}+{','.join(sorted(overrides))}"
    return replace(base, **overrides)


def field_source(name: str) -> str | None:
    """Where a GpuConfig field's number comes from (None for model knobs)."""
    for f in fields(GpuConfig):
        if f.name == name:
            return f.metadata.get("source")
    raise ValueError(f"GpuConfig has no field {name!r}")
