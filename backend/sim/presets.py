"""Hardware presets: the NeuronCore targets, and the one lookup for every kind of preset.

Every preset class (:class:`NeuronConfig` here, ``backend.sim.gpu.GpuConfig``,
``backend.sim.tpu.TpuConfig``) is built on ``backend.sim.spec``: typed frozen dataclasses whose
fields carry a unit, a help text and a source (``config.explain("sbuf_bytes")``,
``print(config.table())``). :func:`get_target` finds any preset
by name, :func:`kinds` and :func:`list_presets` list them, :func:`derive` makes what-ifs, and the
default target of each kind is named once here.

NeuronCore sources are NDOCS paths (AWS Neuron docs, ``awsdocs-neuron.readthedocs-hosted.com/en/
latest/``) as collected in shared/hardware.md. All figures are per NeuronCore: the simulator models
one core, so chip figures are divided by physical cores per chip.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from backend.sim.hardware_kinds import KINDS
from backend.sim.spec import ASSUMPTION, HardwareConfig, spec

__all__ = ["NeuronConfig", "TARGETS", "DEFAULT_NEURON_TARGET", "DEFAULT_GPU_TARGET", "DEFAULT_TPU_TARGET",
           "DEFAULT_TARGETS",
           "kinds", "list_presets", "get_target", "derive", "KiB", "MiB", "GiB"]

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3

# The default of each kind is named once, in backend.sim.kinds.
DEFAULT_TARGETS = {name: k.default_target for name, k in KINDS.items()}
DEFAULT_NEURON_TARGET = DEFAULT_TARGETS["neuron"]
DEFAULT_GPU_TARGET = DEFAULT_TARGETS["gpu"]
DEFAULT_TPU_TARGET = DEFAULT_TARGETS["tpu"]

ARCH_V2 = "nki/guides/architecture/trainium_inferentia2_arch"
ARCH_V3 = "nki/guides/architecture/trainium2_arch"
ARCH_V4 = "nki/guides/architecture/trainium3_arch"
ISA = "general/nki/api/nki/isa/__init__.py (docstrings, Sep 2025)"
DMA_OVERVIEW = "nki/get-started/about/nki-dma-overview"
DMA_BW_GUIDE = "nki/deep-dives/nki-dma-bandwidth-guide"
TRN2_PAGE = "about-neuron/arch/neuron-hardware/trainium2"


@dataclass(frozen=True)
class NeuronConfig(HardwareConfig):
    """One NeuronCore's resources. Defaults are NC-v3 (trn2); other presets override."""

    kind = "neuron"
    name: str = "trn2"
    generation: str = spec("NC-v3", unit="", source=TRN2_PAGE, help="NeuronCore generation")
    cores_per_chip: int = spec(8, unit="cores", source=TRN2_PAGE + " (8 physical; 4 logical at LNC=2)",
                               help="physical NeuronCores per chip; chip figures are divided by it")
    partitions: int = spec(128, unit="partitions", source=ARCH_V3,
                           help="SBUF/PSUM partitions: the parallel (lane) axis of every engine")

    # -- TensorE: 128x128 systolic array; nc_matmul(stationary[K<=128, M<=128], moving[K, N<=512])
    tensor_clock_hz: float = spec(2.4e9, unit="Hz", source=ARCH_V3, help="TensorE clock")
    pe_rows: int = spec(128, unit="PEs", source=ARCH_V3, help="systolic array rows (contraction K per pass)")
    pe_cols: int = spec(128, unit="PEs", source=ARCH_V3, help="systolic array columns (stationary M)")
    moving_free_max: int = spec(512, unit="elements", source=ISA + " nc_matmul",
                                help="largest moving free size N of one nc_matmul")
    stationary_free_max: int = spec(128, unit="elements", source=ISA + " nc_matmul",
                                    help="largest stationary free size M of one nc_matmul")
    fp32_matmul_rate: float = spec(0.25, unit="x bf16", source=ISA + " nc_matmul (4x cycles for float32)",
                                   help="fp32 matmul throughput relative to bf16 (cost divides by it)")
    fp8_matmul_rate: float = spec(2.0, unit="x bf16", source=ARCH_V3 + " (FP8 double-row: 158 vs 79 TFLOPS)",
                                  help="fp8 matmul throughput relative to bf16 (cost divides by it)")

    # -- Vector / Scalar / GpSimd: lanes = partitions; rates in elements per partition per cycle
    vector_clock_hz: float = spec(0.96e9, unit="Hz", source=ARCH_V3, help="VectorE clock")
    vector_rate_2byte: float = spec(4.0, unit="elem/partition/cycle",
                                    source=ARCH_V3 + " (512 bf16/fp16 elem/cycle over 128 lanes)",
                                    help="VectorE streaming rate for 2-byte dtypes")
    vector_rate_4byte: float = spec(2.0, unit="elem/partition/cycle",
                                    source=ARCH_V3 + " (256 elem/cycle over 128 lanes)",
                                    help="VectorE streaming rate for 4-byte dtypes")
    scalar_clock_hz: float = spec(1.2e9, unit="Hz", source=ARCH_V3, help="ScalarE clock")
    scalar_rate_2byte: float = spec(1.0, unit="elem/partition/cycle", source=ARCH_V3 + " (128 elem/cycle)",
                                    help="ScalarE streaming rate for 2-byte dtypes")
    gpsimd_clock_hz: float = spec(1.2e9, unit="Hz", source=ARCH_V3, help="GpSimdE clock")
    gpsimd_rate: float = spec(1.0, unit="elem/partition/cycle", source=ARCH_V2 + " (8 cores x 512-bit = 128 lanes)",
                              help="GpSimdE streaming rate")
    min_ii_cycles: int = spec(64, unit="cycles", source=ISA + " (MIN_II ~ 64 engine cycles)",
                              help="minimum initiation interval: the floor of any streaming instruction")
    access_overhead_cycles: int = spec(60, unit="cycles",
                                       source=ARCH_V2 + " (~60 cycles static overhead per tensor access)",
                                       help="static cost of each tensor access by an engine")
    dependency_overhead_cycles: int = spec(100, unit="cycles",
                                           source="shared/hardware.md instruction costs "
                                                  "(+~100 cycles dependent instruction)",
                                           help="extra cost of an instruction waiting on another's result")
    vector_gpsimd_share_sbuf: bool = spec(False, unit="", source=ARCH_V3 + " (lifted on NC-v3)",
                                          help="VectorE and GpSimdE share one SBUF port (NC-v2)")
    vector_scalar_share_psum: bool = spec(False, unit="", source=ARCH_V3 + " (lifted on NC-v3)",
                                          help="VectorE and ScalarE share PSUM access (NC-v2)")

    # -- on-chip memories
    sbuf_bytes: int = spec(28 * MiB, unit="B", source=ARCH_V3 + " (128 partitions x 224 KiB)",
                           help="state buffer (on-chip SRAM feeding the engines)")
    sbuf_reserved_bytes: int = spec(128 * 16 * KiB, unit="B",
                                    source=ARCH_V2 + " (16 KiB/partition reserved for the compiler; "
                                                     "assumed unchanged on v3+)",
                                    help="SBUF the compiler keeps for itself; kernels get the rest")
    psum_bytes: int = spec(2 * MiB, unit="B", source=ARCH_V3 + " (128 partitions x 16 KiB)",
                           help="partial-sum buffer where TensorE accumulates in fp32")
    psum_banks: int = spec(8, unit="banks", source=ARCH_V3 + " (8 banks of 2 KiB = 512 fp32 per partition)",
                           help="PSUM banks per partition: independent accumulation targets")

    # -- DMA
    dma_engines: int = spec(16, unit="engines", source=DMA_OVERVIEW, help="DMA engines per core")
    dma_queues_per_engine: int = spec(16, unit="queues", source=DMA_OVERVIEW, help="queues per DMA engine")
    dma_partitions_per_engine: int = spec(8, unit="partitions", source=DMA_OVERVIEW + " (128 partitions / 16 engines)",
                                          help="SBUF partitions one DMA engine serves")
    dma_engine_bytes_per_s: float = spec(23e9, unit="B/s",
                                         source=DMA_BW_GUIDE + " (measured ~23 B/ns; theoretical 27.2 GB/s in "
                                                + DMA_OVERVIEW + ")",
                                         help="sustained rate of one DMA engine with >= 4 KiB per partition")
    dma_fixed_latency_ns: float = spec(1300.0, unit="ns",
                                       source=DMA_BW_GUIDE + " (~1300 ns semaphore-to-start, cross-engine)",
                                       help="fixed start latency of a DMA, semaphore to first byte")
    dma_descriptor_overhead_bytes: int = spec(256, unit="B", plausible=(128, 512),
                                              source=ASSUMPTION + ": per-descriptor cost as bytes of transfer "
                                                     "time, from the knees in " + DMA_BW_GUIDE + " (< 256 B "
                                                     "per partition is overhead-bound; >= 4 KiB saturates, "
                                                     "which bounds it near 512 B); no per-descriptor figure "
                                                     "is published (hardware DGE: ~600 ns per DMA "
                                                     "instruction on NC-v3, not per descriptor)",
                                              help="each descriptor costs at least this many bytes of "
                                                   "transfer time")

    hardware_dge: bool = spec(True, unit="",
                              source="nki.isa.dma_copy (hwdge: the Sync or Scalar engine sequencers invoke the DGE "
                                     "hardware block; Trn2/Trn3 pages) and nki-dge",
                              help="DMA descriptors are generated on the core per DMA instruction (cost: "
                                   "assumption dma.issue_ns per instruction on dma.issue_queues queues)")

    # -- HBM (chip figure / physical cores)
    hbm_bytes: int = spec(12 * GiB, unit="B", source=TRN2_PAGE + " (96 GiB per chip / 8 cores)",
                          help="this core's share of the chip's HBM")
    hbm_bytes_per_s: float = spec(2.9e12 / 8, unit="B/s",
                                  source=TRN2_PAGE + " (2.9 TB/s per chip / 8; " + ARCH_V3 + " says 3 TB/s)",
                                  help="this core's share of the chip's HBM bandwidth")

    # -- host side (not NeuronCore hardware; modelling assumptions, tune with derive())
    launch_overhead_ns: float = spec(5000.0, unit="ns", plausible=(2000.0, 20000.0),
                                     source=ASSUMPTION + ": eager dispatch of one op (runtime call, queue "
                                            "setup, semaphore reset); same order as a CUDA eager launch "
                                            "(~3.3 us, shared/hardware.md), no published Neuron figure",
                                     help="host time to dispatch one eager op to the device")
    host_link_bytes_per_s: float = spec(25e9, unit="B/s", plausible=(12e9, 32e9),
                                        source=ASSUMPTION + ": host<->device over PCIe Gen4 x16, ~25 GB/s effective",
                                        help="host<->device copy rate")
    host_flops_per_s: float = spec(200e9, unit="FLOP/s", plausible=(50e9, 1e12),
                                   source=ASSUMPTION + ": fp32 on a few host cores with AVX-512 for fallback ops",
                                   help="host compute rate for ops that fall back to the CPU")
    host_bytes_per_s: float = spec(20e9, unit="B/s", plausible=(10e9, 50e9),
                                   source=ASSUMPTION + ": host memory bandwidth seen by one fallback op",
                                   help="host memory rate for ops that fall back to the CPU")

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


TRN1 = NeuronConfig.cited(
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
    hardware_dge=(False, "nki-dge / nki.isa.dma_copy (hardware DGE is documented for Trn2 and later; on NC-v2 "
                  "static transfers use descriptors the runtime writes to HBM before execution, indirect ones "
                  "GpSimdE-generated descriptors, costed as dma_descriptor_gen)"),
    hbm_bytes=(16 * GiB, "about-neuron/arch/neuron-hardware/trainium (32 GiB per chip / 2 cores)"),
    hbm_bytes_per_s=(820e9 / 2, "about-neuron/arch/neuron-hardware/trainium (820 GB/s per chip, "
                     "one page says GiB/s; / 2 cores)"),
)

TRN2 = NeuronConfig.cited("trn2")

TRN3 = NeuronConfig.cited(
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

# -- every kind's presets ----------------------------------------------------------------------
# kind -> (module, attribute) holding its presets (backend.sim.kinds). Imported on first lookup, so
# importing backend.sim pulls in no other cost model and no preset module has to import this one first.
_PRESET_TABLES = {name: k.presets for name, k in KINDS.items()}


def kinds() -> tuple[str, ...]:
    """The kinds of hardware with presets, e.g. ``("neuron", "gpu", "tpu")``."""
    return tuple(_PRESET_TABLES)


# The simulated device that runs each kind of target.
_DEVICE_OF_KIND = {"neuron": "neuron", "gpu": "cuda", "tpu": "tpu"}


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in _PRESET_TABLES:
        raise ValueError(f"unknown preset kind {kind!r}; known: {', '.join(_PRESET_TABLES)}")


def list_presets(kind: str | None = None) -> dict[str, HardwareConfig]:
    """The presets of one kind, or of every kind, by name."""
    _check_kind(kind)
    found: dict[str, HardwareConfig] = {}
    for k in ([kind] if kind else _PRESET_TABLES):
        module, attribute = _PRESET_TABLES[k]
        found.update(getattr(importlib.import_module(module), attribute))
    return found


def get_target(target: str | HardwareConfig | None = None, kind: str | None = None) -> HardwareConfig:
    """A preset by name (case-insensitive), e.g. ``"trn2"`` or ``"h100"``; a config passes through.

    ``None`` means the default target of ``kind`` (the NeuronCore default when no kind is
    given). With ``kind``, a preset of another kind is refused.
    """
    _check_kind(kind)
    if target is None:
        target = DEFAULT_TARGETS[kind or "neuron"]
    config = target if isinstance(target, HardwareConfig) else _named(str(target).lower())
    if config is None or (kind is not None and config.kind != kind):
        mismatch = ""
        if config is not None:
            device = _DEVICE_OF_KIND.get(config.kind, config.kind)
            mismatch = (f" ({config.name!r} is a {config.kind} target: select it on the {device!r} device, "
                        f"e.g. wb.set_device({device!r}, {config.name!r}))")
        raise ValueError(f"unknown target {target if config is None else config.name!r}; known{f' {kind}' if kind else ''} "
                         f"targets: {', '.join(sorted(list_presets(kind)))}{mismatch}")
    return config


def _named(name: str) -> HardwareConfig | None:
    """A preset by name; ``"<neuron preset>/lnc2"`` is that preset's logical core at LNC=2."""
    config = list_presets().get(name)
    if config is None and "/lnc" in name:
        from backend.sim.logical_cores import lnc_of, logical_core, physical_name

        base = list_presets("neuron").get(physical_name(name))
        if base is not None:
            config = logical_core(base, lnc_of(name))
    return config


def derive(base: str | HardwareConfig, name: str | None = None, **changes) -> HardwareConfig:
    """A what-if variant of a preset, e.g. ``derive("trn2", sbuf_bytes=48 * MiB)`` -> ``"trn2*"``."""
    return get_target(base).derive(name=name, **changes)
