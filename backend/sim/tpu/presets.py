"""TPU presets (Cloud TPU v5e, v5p, v6e Trillium): published chip numbers plus model knobs.

Built on the one preset mechanism (``backend.sim.spec``). Chip figures come from the Google Cloud
TPU system-architecture pages (``docs.cloud.google.com/tpu/docs/<version>``); where Google's own
pages disagree between revisions the chosen value and the other are both named in the source.
Everything the pages do not print is an ``ASSUMPTION`` with a plausible range. The model sees a
whole chip as one device (v5p's two TensorCores run as one "megacore", as XLA drives them), so
rates are per chip. Look presets up with ``get_target("v6e")`` (or :func:`get_tpu`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from backend.sim.presets import get_target
from backend.sim.spec import ASSUMPTION, HardwareConfig, spec

__all__ = ["TpuConfig", "v5e", "v5p", "v6e", "PRESETS", "get_tpu"]

V5E = "cloud.google.com/tpu/docs/v5e (system architecture)"
V5P = "cloud.google.com/tpu/docs/v5p (system architecture)"
V6E = "docs.cloud.google.com/tpu/docs/v6e (system architecture)"
_SPLASH = ("MaxText default (github.com/AI-Hypercomputer/maxtext MaxText/configs/base.yml, "
           "splash attention)")


def _splash_block(unit: str, keys: str, help: str):
    """A splash-attention block size at MaxText's default, 512."""
    return spec(512, unit=unit, source=f"{_SPLASH} {keys}", help=help)


_CLOCK_RULE = "derived: peak bf16 / (TensorCores x MXUs x MXU rows x cols x 2 FLOP per MAC)"


@dataclass(frozen=True, slots=True)
class TpuConfig(HardwareConfig):
    """One TPU chip as the cost model sees it. Defaults are v6e; other presets override."""

    kind = "tpu"
    name: str = "v6e"
    generation: str = spec("v6e (Trillium)", unit="", source=V6E, help="TPU generation")
    tensorcores_per_chip: int = spec(1, unit="cores", source=V6E + ": one TensorCore per chip",
                                     help="TensorCores per chip; XLA drives them as one device")
    mxus_per_core: int = spec(
        4, unit="MXUs", help="matrix-multiply units (systolic arrays) per TensorCore",
        source="cloud.google.com/tpu/docs/v6e (2024 revision: 4 MXUs per TensorCore); a later "
               "revision says 2, which with 918 TFLOPs would need a 3.5 GHz clock, so 4 at "
               "1.75 GHz is taken")
    mxu_size: int = spec(256, unit="PEs", source=V6E + ": 256x256 MXUs",
                         help="rows = columns of one MXU; contraction (K) and stationary-operand "
                              "free dims are padded to it")
    clock_hz: float = spec(1.75e9, unit="Hz", source=_CLOCK_RULE + " = 918e12 / (1 x 4 x 256^2 x 2) = 1.751 GHz",
                           help="TensorCore clock")
    bf16_flops_per_s: float = spec(918e12, unit="FLOP/s", source=V6E + ": peak compute per chip (bf16)",
                                   help="dense bf16 MXU peak of the chip")
    int8_ops_per_s: float = spec(1836e12, unit="FLOP/s", source=V6E + ": peak compute per chip (Int8)",
                                 help="int8 MXU peak of the chip (integer ops counted as FLOPs)")
    vpu_lanes: int = spec(128, unit="lanes", source=V6E + ": VPU of 128 lanes x 8 sublanes", plausible=(64, 256),
                          help="vector unit lanes (the minor dimension of a vector register)")
    vpu_sublanes: int = spec(8, unit="sublanes", source=V6E + ": VPU of 128 lanes x 8 sublanes", plausible=(4, 16),
                             help="vector unit sublanes; also the granule the streamed (M) dim pads to")
    vpu_ops_per_cycle: int = spec(
        2, unit="FLOP/lane/cycle", plausible=(1, 4),
        source=ASSUMPTION + ": two elementwise results per (lane, sublane) per cycle; the pages "
               "print no VPU rate",
        help="elementwise results each VPU lane-sublane produces per cycle")
    hbm_bytes: float = spec(32e9, unit="B", source=V6E + ": HBM capacity per chip (32 GB)",
                            help="HBM capacity of the chip")
    hbm_bytes_per_s: float = spec(1638e9, unit="B/s",
                                  source=V6E + ": HBM bandwidth per chip 1638 GBps (another revision: 1640)",
                                  help="HBM bandwidth of the chip")
    ici_bytes_per_s: float = spec(800e9, unit="B/s",
                                  source=V6E + ": bidirectional ICI bandwidth per chip 800 GBps",
                                  help="inter-chip interconnect bandwidth per chip, both directions")
    ici_ports: int = spec(4, unit="ports", source=V6E + ": ICI ports per chip", plausible=(4, 6),
                          help="ICI links per chip")
    ici_topology: str = spec("2D torus", unit="", source=V6E + ": interconnect topology",
                             help="how chips of a pod are wired")
    chips_per_host: int = spec(8, unit="chips", source=V6E + ": chips per host", help="chips one host VM drives")
    pod_chips: int = spec(256, unit="chips", source=V6E + ": TPU Pod size", help="chips in a full pod")
    host_link_bytes_per_s: float = spec(
        64e9, unit="B/s", plausible=(25e9, 64e9),
        source=ASSUMPTION + ": PCIe Gen5 (" + V6E + ") x16 at 32 GT/s -> 64 GB/s per direction; "
               "the lane count is not printed",
        help="host<->chip copy rate per direction")
    # -- model knobs (not hardware numbers) -------------------------------------------------
    max_mxu_efficiency: float = spec(
        0.85, unit="of peak", plausible=(0.7, 0.95),
        source=ASSUMPTION + ": large XLA matmuls sustain ~85% of the MXU peak after padding; the "
               "GPU model's ceiling is 0.8",
        help="best fraction of the MXU peak a matmul sustains on padded tiles")
    max_hbm_efficiency: float = spec(
        0.9, unit="of peak", plausible=(0.8, 0.95),
        source=ASSUMPTION + ": streaming fusions reach ~90% of HBM peak, as STREAM copies do on GPUs",
        help="best fraction of HBM bandwidth a streaming fusion reaches")
    fp32_matmul_passes: int = spec(
        6, unit="bf16 passes", plausible=(1, 6),
        source=ASSUMPTION + ": fp32 products at PyTorch's fp32 accuracy use XLA precision HIGHEST "
               "(6 bf16 MXU passes); 'high' is 3 and 'default' 1",
        help="bf16 MXU passes one fp32 matmul takes (cost multiplies by it)")
    fusion_overhead_ns: float = spec(
        500.0, unit="ns", plausible=(100.0, 3000.0),
        source=ASSUMPTION + ": fixed cost of one XLA fusion inside a compiled program (DMA setup "
               "and pipeline fill); there is no per-op host launch on the compiled path",
        help="fixed time every fusion (kernel) of the compiled program pays")

    attention_softmax_exposed: float = spec(
        1.0, unit="of softmax", plausible=(0.5, 1.0),
        source=ASSUMPTION + ": the splash kernel's VPU softmax runs after its MXU products, as in every "
               "fusion (1.0); the VLIW bundles can overlap part of it with the next block's products",
        help="share of attention's VPU softmax time not hidden under its MXU work")
    gradient_reduction_exposed: float = spec(
        1.0, unit="of its time", plausible=(0.5, 1.0),
        source=ASSUMPTION + ": a gradient reduce-scatter the TensorCore runs itself (no SparseCore "
               "offload) is not overlapped with compute; MaxText's v6e flags offload it to the SparseCore "
               "because that is what lets it overlap (github.com/AI-Hypercomputer/maxtext "
               "benchmarks/xla_flags_library.py ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE: 'useful for "
               "reducing the gradient reduction all-reduce time with overlapping with compute'); the "
               "latency-hiding scheduler may still hide part of it",
        help="share of the FSDP gradient reduction's ICI time left on the step when the TensorCore runs it")
    # -- compiled program settings (the recipe's, not the chip's) ------------------------------
    gradient_reduction_on_sparsecore: bool = spec(
        False, unit="", help="the FSDP gradient reduction runs on the SparseCores, overlapped with compute",
        source="MaxText default (github.com/AI-Hypercomputer/maxtext benchmarks/xla_flags_library.py: "
               "SparseCore collective offload is opt-in, ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE)")
    # -- attention kernel settings (the compiled program's, not the chip's) ----------------
    attention_block_q: int = _splash_block("rows", "sa_block_q", "query rows of one score block (forward)")
    attention_block_kv: int = _splash_block("cols", "sa_block_kv", "key columns of one score block (forward)")
    attention_block_q_bwd: int = _splash_block("rows", "sa_block_q_dkv / sa_block_q_dq",
                                               "query rows of one score block in the backward kernels")
    attention_block_kv_bwd: int = _splash_block("cols", "sa_block_kv_dkv / sa_block_kv_dq",
                                                "key columns of one score block in the backward kernels")
    attention_fused_backward: bool = spec(
        False, unit="", source=_SPLASH + " sa_use_fused_bwd_kernel",
        help="one fused dq/dkv backward kernel (else a dkv and a dq kernel, each recomputing the scores)")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ValueError(f"TpuConfig.{f.name} must be positive, got {value!r}")
        for knob in ("max_mxu_efficiency", "max_hbm_efficiency", "attention_softmax_exposed",
                     "gradient_reduction_exposed"):
            if getattr(self, knob) > 1:
                raise ValueError(f"TpuConfig.{knob} is a fraction; got {getattr(self, knob)}")

    # -- derived figures ---------------------------------------------------------------------
    @property
    def mxu_count(self) -> int:
        """MXUs on the chip."""
        return self.tensorcores_per_chip * self.mxus_per_core

    @property
    def mxu_peak_from_clock(self) -> float:
        """bf16 peak the MXU count, size and clock imply (checks the cited peak)."""
        return self.mxu_count * self.mxu_size ** 2 * 2 * self.clock_hz

    @property
    def vpu_flops_per_s(self) -> float:
        """Elementwise rate of the chip's vector units."""
        return (self.tensorcores_per_chip * self.vpu_lanes * self.vpu_sublanes * self.vpu_ops_per_cycle
                * self.clock_hz)

    @property
    def peak_flops_per_s(self) -> float:
        """The MFU denominator: dense bf16 peak (the name the other presets use)."""
        return self.bf16_flops_per_s


_V5_VPU = ASSUMPTION + ": same 8 x 128 VPU as v6e (the v5 pages give no VPU shape)"
_PCIE4 = ASSUMPTION + ": PCIe Gen4 x16 (16 GT/s) -> 32 GB/s per direction"
_MXU_128 = "docs.jax.dev/en/latest/pallas/tpu (128x128 MXUs before v6e)"


def _v5(page: str) -> dict:
    """The fields v5e and v5p share: four 128x128 MXUs per TensorCore, an 8 x 128 VPU, PCIe Gen4."""
    return dict(generation=(page.split("/")[-1].split(" ")[0], page),
                mxus_per_core=(4, page + ": four MXUs per TensorCore"), mxu_size=(128, _MXU_128),
                vpu_lanes=(128, _V5_VPU), vpu_sublanes=(8, _V5_VPU), host_link_bytes_per_s=(32e9, _PCIE4))


# One row per field, laid out like the pages' tables: ((v5e value, note), (v5p value, note)).
_V5_TABLE: dict[str, tuple] = {
    "tensorcores_per_chip": ((1, "one TensorCore per chip"), (2, "topology table, 2x2x1 = 4 chips = 8 cores")),
    "clock_hz": ((1.5e9, _CLOCK_RULE + " = 197e12 / (1 x 4 x 128^2 x 2) = 1.503 GHz"),
                 (1.75e9, _CLOCK_RULE + " = 459e12 / (2 x 4 x 128^2 x 2) = 1.751 GHz")),
    "bf16_flops_per_s": ((197e12, "peak compute per chip (bf16)"), (459e12, "peak compute per chip (bf16)")),
    "int8_ops_per_s": ((393e12, "peak compute per chip (Int8)"), (918e12, "peak compute per chip (Int8)")),
    "hbm_bytes": ((16e9, "HBM2 capacity 16 GB"), (95e9, "HBM2e capacity 95 GB")),
    "hbm_bytes_per_s": ((819e9, "HBM2 bandwidth 819 GBps (another revision: 800 GiBps)"),
                        (2765e9, "HBM2e bandwidth 2765 GBps")),
    "ici_bytes_per_s": ((400e9, "bidirectional ICI bandwidth per chip 400 GBps"),
                        (600e9, "inter-chip interconnect 4800 Gbps = 600 GB/s")),
    "ici_topology": (("2D torus", "interconnect topology"), ("3D torus", "interconnect topology")),
    "chips_per_host": ((8, "chips per host"), (4, "topology table, 2x2x1 = 4 chips on 1 host")),
    "pod_chips": ((256, "TPU Pod size"), (8960, "TPU Pod size")),
}


def _v5_preset(name: str, page: str, column: int, **own) -> TpuConfig:
    rows = {key: (row[column][0], f"{page}: {row[column][1]}") for key, row in _V5_TABLE.items()}
    return TpuConfig.cited(name, **_v5(page), **rows, **own)


v6e = TpuConfig(name="v6e")
v5e = _v5_preset("v5e", V5E, 0, ici_ports=(4, V5E + ": ICI ports per chip"))
v5p = _v5_preset("v5p", V5P, 1, ici_ports=(6, ASSUMPTION + ": a 3D torus gives each chip six neighbours"))

PRESETS: dict[str, TpuConfig] = {cfg.name: cfg for cfg in (v5e, v5p, v6e)}


def get_tpu(name: str | TpuConfig | None = None) -> TpuConfig:
    """The TPU preset called ``name`` (case-insensitive; None: the default); configs pass through."""
    return get_target(name, kind="tpu")
