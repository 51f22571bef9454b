"""Cost of one GPU kernel: its host launch time, and its device time max(compute, memory).

Compute and memory overlap inside a kernel (warps stall on loads while others compute), so the
slower of the two sets the kernel's device time. The launch overhead is host time: alone on an
idle stream a kernel takes ``launch + device`` (``total_ns``); in a stream the host enqueues the
next kernels while the device runs this one, which the timeline (``timeline.py``) models.
Memory time comes from L2 for kernels whose traffic fits there, from HBM otherwise
(``tiling.memory_time_ns``). Which unit computes:

- matrix-unit ops (``is_matmul_like``: matmul, conv, attention) run on tensor cores at their
  dtype's dense peak, shaped by the tile model of ``tiling.py``. fp32 is the exception:
  PyTorch's default (``allow_tf32 = False``) computes fp32 matmuls in full fp32 on CUDA cores,
  so they use the CUDA-core fp32 peak unless the config allows TF32. fp8 on a GPU without fp8
  tensor cores runs at the bf16 rate; float64 runs at the fp64 CUDA-core rate.
- everything else runs on CUDA cores at max_compute_efficiency x the fp32 (fp64) peak, which
  almost never matters: such ops are memory-bound.

FLOPs and the bytes read and written come from ``backend.sim.flops`` so that the GPU and the
NeuronCore count the same work (in-place list ops such as ``_fused_adamw_`` included); a kernel
reports them split by the level that serves them (L2 or HBM), so each level's bandwidth bound
can be checked on its own.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from backend.sim.flops import is_matmul_like, op_flops, op_read_write_bytes
from backend.sim.descriptors import DTYPE_BYTES, OpRecord
from backend.sim.gpu.presets import GpuConfig
from backend.sim.gpu.shapes import gemm_shape
from backend.sim.gpu.tiling import (GemmPlan, GemmShape, fits_in_l2, memory_time_ns, plan_gemm,
                                    split_memory_time_ns)

__all__ = ["KernelCost", "matmul_unit", "vector_compute_ns", "gemm_cost", "stream_cost",
           "record_cost", "fused_cost", "transfer_ns"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KernelCost:
    """Time split of one kernel; ``tensor_ns``/``cuda_ns`` run one after the other in a CTA.

    ``launch_ns`` is host time to enqueue it. ``read_bytes``/``write_bytes`` are the kernel's
    memory traffic; ``l2_read_bytes``/``l2_write_bytes`` the share of it served by L2 (all of it
    when ``l2_hit``), the rest crosses HBM. ``memory_ns`` streams each share at its level's rate.
    """

    launch_ns: float
    tensor_ns: float
    cuda_ns: float
    memory_ns: float
    flops: int
    read_bytes: int
    write_bytes: int
    plan: GemmPlan | None = None
    tensor_flops: int = 0           # the share of ``flops`` done on tensor cores
    l2_read_bytes: int = 0
    l2_write_bytes: int = 0

    @property
    def l2_hit(self) -> bool:
        """Every byte is served from L2."""
        return self.l2_read_bytes + self.l2_write_bytes == self.read_bytes + self.write_bytes

    @property
    def hbm_read_bytes(self) -> int:
        return self.read_bytes - self.l2_read_bytes

    @property
    def hbm_write_bytes(self) -> int:
        return self.write_bytes - self.l2_write_bytes

    @property
    def compute_ns(self) -> float:
        return self.tensor_ns + self.cuda_ns

    @property
    def device_ns(self) -> float:
        """Time the kernel occupies the device once it starts."""
        return max(self.compute_ns, self.memory_ns)

    @property
    def total_ns(self) -> float:
        """Time alone on an idle stream: launched, then run."""
        return self.launch_ns + self.device_ns

    @property
    def bound(self) -> str:
        """What limits the kernel: "launch" (shorter than its launch path), "compute" or "memory"."""
        busy = self.device_ns
        if self.launch_ns >= busy:
            return "launch"
        return "compute" if self.compute_ns >= self.memory_ns else "memory"


def matmul_unit(config: GpuConfig, dtype: str) -> tuple[str, float]:
    """(track, peak FLOP/s) a matrix product of ``dtype`` runs at."""
    if dtype in ("bfloat16", "float16"):
        return "tensor_core", config.bf16_tensor_flops_per_s
    if dtype.startswith("float8"):
        return "tensor_core", config.fp8_tensor_flops_per_s or config.bf16_tensor_flops_per_s
    if dtype == "float32" and config.allow_tf32:
        return "tensor_core", config.tf32_tensor_flops_per_s
    if dtype == "float64":
        return "cuda_core", config.fp64_flops_per_s
    # full fp32 (PyTorch's default) and integer products: SIMT GEMM on CUDA cores.
    return "cuda_core", config.fp32_flops_per_s


def vector_compute_ns(config: GpuConfig, flops: int, dtype: str) -> float:
    """CUDA-core time for non-matrix FLOPs at the sustained fraction of the fp32/fp64 peak."""
    peak = config.fp64_flops_per_s if dtype == "float64" else config.fp32_flops_per_s
    return flops / (peak * config.max_compute_efficiency) * 1e9


def _matmul_compute(config: GpuConfig, shape: GemmShape | None, dtype: str, flops: int,
                    hbm_bytes: int) -> tuple[str, float, GemmPlan | None]:
    """(track, compute ns, plan) of a matrix product; without a shape, an ideal single wave."""
    track, peak = matmul_unit(config, dtype)
    if shape is None:
        log.debug("no GEMM shape known; costing %d FLOPs without tile losses", flops)
        return track, config.hbm_latency_ns + flops / (peak * config.max_compute_efficiency) * 1e9, None
    work_scale = max(1.0, flops / shape.flops)
    plan = plan_gemm(config, shape, peak, DTYPE_BYTES.get(dtype, 4), hbm_bytes, work_scale)
    return track, plan.compute_ns, plan


def gemm_cost(config: GpuConfig, shape: GemmShape, dtype: str, launch_ns: float,
              read_bytes: int | None = None, write_bytes: int | None = None) -> KernelCost:
    """One GEMM kernel from explicit numbers; bytes default to reading A, B and writing C."""
    itemsize = DTYPE_BYTES.get(dtype, 4)
    if read_bytes is None:
        read_bytes = shape.batch * (shape.m + shape.n) * shape.k * itemsize
    if write_bytes is None:
        write_bytes = shape.batch * shape.m * shape.n * itemsize
    return _matmul_kernel(config, shape, dtype, shape.flops, read_bytes, write_bytes, launch_ns)


def _matmul_kernel(config: GpuConfig, shape: GemmShape | None, dtype: str, flops: int,
                   read_bytes: int, write_bytes: int, launch_ns: float) -> KernelCost:
    track, compute_ns, plan = _matmul_compute(config, shape, dtype, flops, read_bytes + write_bytes)
    extra = plan.extra_hbm_bytes if plan else 0
    traffic = read_bytes + write_bytes + extra
    memory_ns = memory_time_ns(config, traffic)
    on_tensor = track == "tensor_core"
    tensor_ns, cuda_ns = (compute_ns, 0.0) if on_tensor else (0.0, compute_ns)
    # split-K partials are written and read back once each
    read, write = read_bytes + extra // 2, write_bytes + extra // 2
    in_l2 = fits_in_l2(config, traffic)
    return KernelCost(launch_ns, tensor_ns, cuda_ns, memory_ns, flops, read, write, plan,
                      flops if on_tensor else 0, read * in_l2, write * in_l2)


def stream_cost(config: GpuConfig, flops: int, dtype: str, read_bytes: int, write_bytes: int,
                launch_ns: float) -> KernelCost:
    """A CUDA-core kernel (elementwise, reduction, copy) from explicit numbers."""
    traffic = read_bytes + write_bytes
    in_l2 = fits_in_l2(config, traffic)
    return KernelCost(launch_ns, 0.0, vector_compute_ns(config, flops, dtype),
                      memory_time_ns(config, traffic), flops, read_bytes, write_bytes,
                      l2_read_bytes=read_bytes * in_l2, l2_write_bytes=write_bytes * in_l2)


def _record_dtype(record: OpRecord) -> str:
    """The dtype the op computes in: its largest floating input (not a bool mask or fp32 scale)."""
    tensors = record.inputs or record.outputs
    if not tensors:
        return "float32"
    floating = [t for t in tensors if "float" in t.dtype]
    return max(floating, key=lambda t: t.numel).dtype if floating else tensors[0].dtype


def record_cost(config: GpuConfig, record: OpRecord, launch_ns: float) -> KernelCost:
    """One eager op as one kernel (views and transfers are the timeline's business)."""
    flops = op_flops(record)
    read, write = op_read_write_bytes(record)
    dtype = _record_dtype(record)
    if flops and is_matmul_like(record.name):
        return _matmul_kernel(config, gemm_shape(record), dtype, flops, read, write, launch_ns)
    return stream_cost(config, flops, dtype, read, write, launch_ns)


def fused_cost(config: GpuConfig, records: list[OpRecord], launch_ns: float,
               internal_bytes_saved: int = 0) -> KernelCost:
    """One compiled kernel running ``records``: one launch, their FLOPs summed.

    Memory traffic is the records' own traffic less ``internal_bytes_saved`` (intermediates that
    stay on chip, counted by the caller who knows the graph). Each intermediate saves one write
    and at least one read, so the saving comes off writes and reads in equal halves, each
    clamped to what is there. Each record's traffic is served where it would be eagerly (L2
    when that record's traffic fits, else HBM); the saving comes off the HBM share first, the
    largest traffic an intermediate can be. Compute parts run one after the other (a matmul's
    epilogue follows its mainloop).
    """
    tensor_ns = cuda_ns = 0.0
    flops = tensor_flops = read = write = extra = l2_read = l2_write = 0
    for record in records:
        part = record_cost(config, record, 0.0)
        tensor_ns += part.tensor_ns
        cuda_ns += part.cuda_ns
        flops += part.flops
        tensor_flops += part.tensor_flops
        extra += part.plan.extra_hbm_bytes if part.plan else 0
        r, w = op_read_write_bytes(record)
        read, write = read + r, write + w
        l2_read, l2_write = l2_read + part.l2_read_bytes, l2_write + part.l2_write_bytes
    saved_write = min(write, internal_bytes_saved // 2)
    saved_read = min(read, internal_bytes_saved - saved_write)
    read, write = read - saved_read + extra // 2, write - saved_write + extra // 2
    l2_read, l2_write = min(l2_read, read), min(l2_write, write)
    from_hbm = read + write - l2_read - l2_write
    memory_ns = split_memory_time_ns(config, l2_read + l2_write, from_hbm)
    return KernelCost(launch_ns, tensor_ns, cuda_ns, memory_ns, flops, read, write, None,
                      tensor_flops, l2_read, l2_write)


def transfer_ns(config: GpuConfig, nbytes: int) -> float:
    """Host<->device copy over PCIe at the link's per-direction rate (no launch included)."""
    return nbytes / config.pcie_bytes_per_s * 1e9
