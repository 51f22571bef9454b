"""NeuronCore hardware presets: one frozen config per target, every number with its source.

Sources are NDOCS paths (AWS Neuron docs, ``awsdocs-neuron.readthedocs-hosted.com/en/latest/``)
as collected in shared/hardware.md; each field carries its source in ``metadata["source"]``
(``source_of(config, field)`` reads it). Numbers that no page publishes are marked
``ASSUMPTION`` and say why the value was chosen. All figures are per NeuronCore: the
simulator models one core, so chip figures are divided by physical cores per chip.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["NeuronConfig", "TARGETS", "DEFAULT_TARGET", "get_target", "derive", "source_of",
           "KiB", "MiB", "GiB"]

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3

ARCH_V2 = "nki/guides/architecture/trainium_inferentia2_arch"
ARCH_V3 = "nki/guides/architecture/trainium2_arch"
ARCH_V4 = "nki/guides/architecture/trainium3_arch"
ISA = "general/nki/api/nki/isa/__init__.py (docstrings, Sep 2025)"
DMA_OVERVIEW = "nki/get-started/about/nki-dma-overview"
DMA_BW_GUIDE = "nki/deep-dives/nki-dma-bandwidth-guide"
ASSUMPTION = "ASSUMPTION"


def _f(default, source: str):
    return field(default=default, metadata={"source": source})


@dataclass(frozen=True)
class NeuronConfig:
    """One NeuronCore's resources. Defaults are NC-v3 (trn2); other presets override."""

    name: str = "trn2"
    generation: str = _f("NC-v3", "about-neuron/arch/neuron-hardware/trainium2")
    cores_per_chip: int = _f(8, "about-neuron/arch/neuron-hardware/trainium2 (8 physical; 4 logical at LNC=2)")
    partitions: int = _f(128, ARCH_V3)

    # -- TensorE: 128x128 systolic array; nc_matmul(stationary[K<=128, M<=128], moving[K, N<=512])
    tensor_clock_hz: float = _f(2.4e9, ARCH_V3)
    pe_rows: int = _f(128, ARCH_V3)
    pe_cols: int = _f(128, ARCH_V3)
    moving_free_max: int = _f(512, ISA + " nc_matmul")
    stationary_free_max: int = _f(128, ISA + " nc_matmul")
    # Matmul throughput relative to bf16 (cost divides by it): fp32 runs at 1/4 rate.
    fp32_matmul_rate: float = _f(0.25, ISA + " nc_matmul (4x cycles for float32)")
    fp8_matmul_rate: float = _f(2.0, ARCH_V3 + " (FP8 double-row: 158 vs 79 TFLOPS)")

    # -- Vector / Scalar / GpSimd: lanes = partitions; rates in elements per partition per cycle
    vector_clock_hz: float = _f(0.96e9, ARCH_V3)
    vector_rate_2byte: float = _f(4.0, ARCH_V3 + " (512 bf16/fp16 elem/cycle over 128 lanes)")
    vector_rate_4byte: float = _f(2.0, ARCH_V3 + " (256 elem/cycle over 128 lanes)")
    scalar_clock_hz: float = _f(1.2e9, ARCH_V3)
    scalar_rate_2byte: float = _f(1.0, ARCH_V3 + " (128 elem/cycle)")
    gpsimd_clock_hz: float = _f(1.2e9, ARCH_V3)
    gpsimd_rate: float = _f(1.0, ARCH_V2 + " (8 cores x 512-bit = 128 lanes)")
    min_ii_cycles: int = _f(64, ISA + " (MIN_II ~ 64 engine cycles)")
    access_overhead_cycles: int = _f(60, ARCH_V2 + " (~60 cycles static overhead per tensor access)")
    dependency_overhead_cycles: int = _f(100, "shared/hardware.md instruction costs (+~100 cycles dependent instruction)")
    # NC-v2 only: VectorE and GpSimdE share the SBUF port; VectorE and ScalarE share PSUM access.
    vector_gpsimd_share_sbuf: bool = _f(False, ARCH_V3 + " (lifted on NC-v3)")
    vector_scalar_share_psum: bool = _f(False, ARCH_V3 + " (lifted on NC-v3)")

    # -- on-chip memories
    sbuf_bytes: int = _f(28 * MiB, ARCH_V3 + " (128 partitions x 224 KiB)")
    sbuf_reserved_bytes: int = _f(128 * 16 * KiB, ARCH_V2 + " (16 KiB/partition reserved for the compiler; assumed unchanged on v3+)")
    psum_bytes: int = _f(2 * MiB, ARCH_V3 + " (128 partitions x 16 KiB)")
    psum_banks: int = _f(8, ARCH_V3 + " (8 banks of 2 KiB = 512 fp32 per partition)")

    # -- DMA
    dma_engines: int = _f(16, DMA_OVERVIEW)
    dma_queues_per_engine: int = _f(16, DMA_OVERVIEW)
    dma_partitions_per_engine: int = _f(8, DMA_OVERVIEW + " (128 partitions / 16 engines)")
    # Sustained per-engine rate with >= 4 KiB per partition; theoretical is 27.2 GB/s (v2, v3).
    dma_engine_bytes_per_s: float = _f(23e9, DMA_BW_GUIDE + " (measured ~23 B/ns; theoretical 27.2 GB/s in " + DMA_OVERVIEW + ")")
    dma_fixed_latency_ns: float = _f(1300.0, DMA_BW_GUIDE + " (~1300 ns semaphore-to-start, cross-engine)")
    # Below 256 B per descriptor a transfer is overhead-bound: charge one 256 B slot per descriptor.
    dma_descriptor_overhead_bytes: int = _f(256, "shared/hardware.md (< 256 B per partition is overhead-bound), " + DMA_BW_GUIDE)

    # -- HBM (chip figure / physical cores)
    hbm_bytes: int = _f(12 * GiB, "about-neuron/arch/neuron-hardware/trainium2 (96 GiB per chip / 8 cores)")
    hbm_bytes_per_s: float = _f(2.9e12 / 8, "about-neuron/arch/neuron-hardware/trainium2 (2.9 TB/s per chip / 8; " + ARCH_V3 + " says 3 TB/s)")

    # -- host side (not NeuronCore hardware; modelling assumptions, tune with derive())
    launch_overhead_ns: float = _f(5000.0, ASSUMPTION + ": eager dispatch of one op (runtime call, queue setup, "
                                   "semaphore reset); same order as a CUDA eager launch (~3.3 us, shared/hardware.md), "
                                   "no published Neuron figure")
    host_link_bytes_per_s: float = _f(25e9, ASSUMPTION + ": host<->device over PCIe Gen4 x16, ~25 GB/s effective")
    host_flops_per_s: float = _f(200e9, ASSUMPTION + ": fp32 on a few host cores with AVX-512 for fallback ops")
    host_bytes_per_s: float = _f(20e9, ASSUMPTION + ": host memory bandwidth seen by one fallback op")

    # -- derived figures ---------------------------------------------------------------------
    @property
    def peak_flops_per_s(self) -> float:
        """Dense bf16 peak: every PE does one multiply-add per cycle."""
        return self.pe_rows * self.pe_cols * 2 * self.tensor_clock_hz

    @property
    def sbuf_usable_bytes(self) -> int:
        return self.sbuf_bytes - self.sbuf_reserved_bytes

    @property
    def sbuf_partition_bytes(self) -> int:
        return self.sbuf_usable_bytes // self.partitions

    @property
    def psum_bank_bytes(self) -> int:
        """Bytes of one PSUM bank in one partition (2 KiB = 512 fp32)."""
        return self.psum_bytes // self.partitions // self.psum_banks

    @property
    def dma_bytes_per_s(self) -> float:
        """Aggregate rate of all DMA engines, capped by the core's HBM share."""
        return min(self.dma_engines * self.dma_engine_bytes_per_s, self.hbm_bytes_per_s)

    def clock_hz(self, engine: str) -> float:
        return {"tensor": self.tensor_clock_hz, "vector": self.vector_clock_hz,
                "scalar": self.scalar_clock_hz, "gpsimd": self.gpsimd_clock_hz}[engine]


_PRESET_SOURCES: dict[str, dict[str, str]] = {}


def _preset(name: str, **fields: tuple) -> NeuronConfig:
    """Build a preset from ``field=(value, source)`` pairs and remember each source."""
    _PRESET_SOURCES[name] = {k: src for k, (_, src) in fields.items()}
    return NeuronConfig(name=name, **{k: v for k, (v, _) in fields.items()})


TRN1 = _preset(
    "trn1",
    generation=("NC-v2", "about-neuron/arch/neuron-hardware/trainium"),
    cores_per_chip=(2, "about-neuron/arch/neuron-hardware/trainium"),
    tensor_clock_hz=(2.8e9, ARCH_V2),
    fp8_matmul_rate=(1.0, ARCH_V2 + " (cFP8 at the bf16 rate, 92 TFLOPS)"),
    vector_clock_hz=(1.12e9, ARCH_V2),
    vector_rate_2byte=(1.0, ARCH_V2 + " (128 elem/cycle)"),
    vector_rate_4byte=(1.0, ARCH_V2 + " (128 elem/cycle)"),
    scalar_clock_hz=(1.4e9, ARCH_V2),
    gpsimd_clock_hz=(1.4e9, ARCH_V2),
    vector_gpsimd_share_sbuf=(True, ARCH_V2 + " (VectorE and GpSimdE cannot access SBUF together)"),
    vector_scalar_share_psum=(True, ARCH_V2 + " (VectorE and ScalarE cannot access PSUM together)"),
    sbuf_bytes=(24 * MiB, ARCH_V2 + " (128 partitions x 192 KiB)"),
    dma_engine_bytes_per_s=(17e9, DMA_BW_GUIDE + " (measured ~17 B/ns; theoretical 27.2 GB/s)"),
    hbm_bytes=(16 * GiB, "about-neuron/arch/neuron-hardware/trainium (32 GiB per chip / 2 cores)"),
    hbm_bytes_per_s=(820e9 / 2, "about-neuron/arch/neuron-hardware/trainium (820 GB/s per chip, "
                     "one page says GiB/s; / 2 cores)"),
)

TRN2 = _preset("trn2")

TRN3 = _preset(
    "trn3",
    generation=("NC-v4", "about-neuron/arch/neuron-hardware/trainium3"),
    fp8_matmul_rate=(4.0, ARCH_V4 + " (MXFP8 315 TFLOPS vs 79 bf16)"),
    vector_clock_hz=(1.2e9, ARCH_V4 + " (512 bf16 or 256 elem/cycle)"),
    scalar_clock_hz=(1.2e9, ARCH_V4),
    scalar_rate_2byte=(2.0, ARCH_V4 + " (256 bf16/fp16/fp8 elem/cycle)"),
    sbuf_bytes=(32 * MiB, ARCH_V4 + " (128 partitions x 256 KiB)"),
    dma_engine_bytes_per_s=(33e9, DMA_BW_GUIDE + " (measured ~33 B/ns; theoretical 38.4 GB/s)"),
    hbm_bytes=(144 * GiB // 8, "about-neuron/arch/neuron-hardware/trainium3 (144 GiB per chip / 8 cores)"),
    hbm_bytes_per_s=(4.9e12 / 8, "about-neuron/arch/neuron-hardware/trainium3 (4.9 TB/s per chip, "
                     "another page 4.7; / 8 cores)"),
)

TARGETS: dict[str, NeuronConfig] = {c.name: c for c in (TRN1, TRN2, TRN3)}
DEFAULT_TARGET = "trn2"


def get_target(target: str | NeuronConfig | None = None) -> NeuronConfig:
    """A preset by name ("trn1", "trn2", "trn3"); a NeuronConfig passes through."""
    if target is None:
        return TARGETS[DEFAULT_TARGET]
    if isinstance(target, NeuronConfig):
        return target
    try:
        return TARGETS[str(target).lower()]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; known targets: {', '.join(sorted(TARGETS))}") from None


def derive(base: str | NeuronConfig, name: str | None = None, **overrides) -> NeuronConfig:
    """A what-if variant, e.g. ``derive("trn2", sbuf_bytes=48 * MiB)``; named after its changes."""
    base_cfg = get_target(base)
    unknown = set(overrides) - {f.name for f in dataclasses.fields(NeuronConfig)}
    if unknown:
        raise ValueError(f"unknown NeuronConfig fields: {', '.join(sorted(unknown))}")
    if name is None:
        name = base_cfg.name + "".join(f"+{k}={v:g}" if isinstance(v, float) else f"+{k}={v}"
                                       for k, v in sorted(overrides.items()))
    _PRESET_SOURCES[name] = {**_PRESET_SOURCES.get(base_cfg.name, {}),
                             **{k: f"what-if override of {base_cfg.name}" for k in overrides}}
    return dataclasses.replace(base_cfg, name=name, **overrides)


def source_of(config: NeuronConfig, field_name: str) -> str:
    """Where a preset's number comes from: the preset's own source, else the field default's."""
    override = _PRESET_SOURCES.get(config.name, {}).get(field_name)
    if override:
        return override
    for f in dataclasses.fields(config):
        if f.name == field_name:
            return f.metadata.get("source", "")
    raise ValueError(f"NeuronConfig has no field {field_name!r}")
