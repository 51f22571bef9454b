"""Cost of one XLA fusion on a TPU chip: fixed overhead + max(MXU + VPU time, HBM time).

TPUs run compiled: XLA turns the whole graph into fusions, each one kernel of a single program,
so there is no per-op host launch, only ``fusion_overhead_ns`` per fusion. Inside a fusion compute
and HBM streaming overlap (the DMA engines prefetch while the units compute), so the slower of
the two sets its time; MXU and VPU work follow each other (a matmul's epilogue runs on the VPU
after the product). The formulas, all exact:

- matrix-unit ops (``is_matmul_like``) run on the MXUs, weight-stationary systolic arrays of
  ``mxu_size`` x ``mxu_size``. The contraction dim K and the stationary operand's free dim are
  padded to ``mxu_size``; the streamed operand's rows pad only to ``vpu_sublanes`` (8). XLA picks
  which operand is stationary, so the cheaper orientation is taken:

      padded = 2 * batch * pad(K, S) * min(pad(M, 8) * pad(N, S), pad(M, S) * pad(N, 8))
      mxu_ns = work_scale * padded / (rate(dtype) * max_mxu_efficiency)

  A 100x100 @ 100x100 product therefore pays for 128x128 tiles on v5e (S = 128) and 256x256
  on v6e. ``rate`` is the bf16 peak for bf16/fp16 (and fp8, which none of these chips has a
  faster path for), the int8 peak for int8, and bf16 peak / ``fp32_matmul_passes`` for fp32.
  ``work_scale`` is FLOPs per GEMM-equivalent FLOP (2 for attention), as in the GPU model.
- attention runs as splash attention (``attention.py``): the score blocks it does not skip, each
  block's products padded on their own, and the online softmax on the VPU, of which the share
  ``1 - attention_softmax_exposed`` hides under the kernel's MXU time (at most all of it);
- every other op's FLOPs run on the VPU: ``vpu_ns = flops / vpu_flops_per_s``.
- HBM: ``memory_ns = bytes / (hbm_bytes_per_s * max_hbm_efficiency)``.

FLOPs, the GEMM geometry and the minimum HBM bytes of an op come from the same helpers the GPU
model uses, so all three targets count the same work.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from backend.sim.descriptors import OpRecord
# Bytes read and written come from the rule every target shares, and the dtype an op computes in
# is the GPU model's rule, so the targets' counts agree.
from backend.sim.flops import is_matmul_like, op_flops, op_read_write_bytes
from backend.sim.gpu.cost import _record_dtype
from backend.sim.gpu.shapes import gemm_shape
from backend.sim.gpu.tiling import GemmShape
from backend.sim.tpu.attention import attention_work, is_attention
from backend.sim.tpu.presets import TpuConfig

__all__ = ["FusionCost", "mxu_rate", "mxu_padded_flops", "matmul_ns", "vpu_ns", "hbm_ns",
           "fused_cost", "record_cost", "transfer_ns"]


@dataclass(frozen=True, slots=True)
class FusionCost:
    """Time split of one fusion; ``mxu_ns`` and ``vpu_ns`` run one after the other."""

    overhead_ns: float
    mxu_ns: float
    vpu_ns: float
    memory_ns: float
    flops: int
    mxu_flops: int                  # the share of ``flops`` done on the MXUs
    padded_flops: int               # MXU FLOPs issued, tile padding included
    hbm_read_bytes: int
    hbm_write_bytes: int

    @property
    def compute_ns(self) -> float:
        return self.mxu_ns + self.vpu_ns

    @property
    def total_ns(self) -> float:
        return self.overhead_ns + max(self.compute_ns, self.memory_ns)

    @property
    def bound(self) -> str:
        """What limits the fusion: "overhead", "compute" or "memory"."""
        busy = max(self.compute_ns, self.memory_ns)
        if self.overhead_ns >= busy:
            return "overhead"
        return "compute" if self.compute_ns >= self.memory_ns else "memory"


def mxu_rate(config: TpuConfig, dtype: str) -> float:
    """Peak FLOP/s the MXUs reach on products of ``dtype``."""
    if dtype in ("int8", "uint8"):
        return config.int8_ops_per_s
    if dtype in ("float32", "float64"):
        return config.bf16_flops_per_s / config.fp32_matmul_passes
    return config.bf16_flops_per_s


def _pad(dim: int, granule: int) -> int:
    return ceil(dim / granule) * granule


def mxu_padded_flops(config: TpuConfig, shape: GemmShape) -> int:
    """FLOPs the MXUs issue for ``shape`` once K and the stationary dim are padded to the array."""
    size, rows = config.mxu_size, config.vpu_sublanes
    free = min(_pad(shape.m, rows) * _pad(shape.n, size), _pad(shape.m, size) * _pad(shape.n, rows))
    return 2 * shape.batch * _pad(shape.k, size) * free


def matmul_ns(config: TpuConfig, padded_flops: float, dtype: str) -> float:
    """MXU time of ``padded_flops`` at the dtype's rate and the efficiency ceiling."""
    return padded_flops / (mxu_rate(config, dtype) * config.max_mxu_efficiency) * 1e9


def vpu_ns(config: TpuConfig, flops: int) -> float:
    return flops / config.vpu_flops_per_s * 1e9


def hbm_ns(config: TpuConfig, nbytes: int) -> float:
    return nbytes / (config.hbm_bytes_per_s * config.max_hbm_efficiency) * 1e9


def _compute(config: TpuConfig, record: OpRecord) -> tuple[float, float, int, int, int]:
    """(mxu ns, vpu ns, flops, MXU flops, padded MXU flops) of one op."""
    flops = op_flops(record)
    if not (flops and is_matmul_like(record.name)):
        return 0.0, vpu_ns(config, flops), flops, 0, 0
    if is_attention(record):
        issued, softmax = attention_work(record, config, lambda shape: mxu_padded_flops(config, shape))
        mxu, vpu = matmul_ns(config, issued, _record_dtype(record)), vpu_ns(config, softmax)
        hidden = min((1 - config.attention_softmax_exposed) * vpu, mxu)   # never more than the MXU time
        return mxu, vpu - hidden, flops, flops, issued
    shape = gemm_shape(record)
    # Without a known geometry the product is costed unpadded (conv backward, for one).
    padded = flops if shape is None else int(mxu_padded_flops(config, shape) * max(1.0, flops / shape.flops))
    return matmul_ns(config, padded, _record_dtype(record)), 0.0, flops, flops, padded


def fused_cost(config: TpuConfig, records: list[OpRecord], internal_bytes_saved: int = 0) -> FusionCost:
    """One fusion running ``records``: one overhead, their work summed.

    HBM traffic is the records' own less ``internal_bytes_saved`` (intermediates that stay in
    VMEM). Each saved intermediate is one write and one read, so the saving comes off writes and
    reads in equal halves, each clamped to what is there.
    """
    mxu = vpu = 0.0
    flops = mxu_flops = padded = read = write = 0
    for record in records:
        m, v, f, mf, p = _compute(config, record)
        r, w = op_read_write_bytes(record)
        mxu, vpu, flops, mxu_flops, padded = mxu + m, vpu + v, flops + f, mxu_flops + mf, padded + p
        read, write = read + r, write + w
    saved_write = min(write, internal_bytes_saved // 2)
    saved_read = min(read, internal_bytes_saved - saved_write)
    read, write = read - saved_read, write - saved_write
    return FusionCost(config.fusion_overhead_ns, mxu, vpu, hbm_ns(config, read + write), flops,
                      mxu_flops, padded, read, write)


def record_cost(config: TpuConfig, record: OpRecord) -> FusionCost:
    """One op as a fusion of its own."""
    return fused_cost(config, [record])


def transfer_ns(config: TpuConfig, nbytes: int) -> float:
    """Host<->chip copy over the host link at its per-direction rate."""
    return nbytes / config.host_link_bytes_per_s * 1e9
