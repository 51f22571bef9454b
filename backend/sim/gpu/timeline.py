"""A GPU timeline built op by op: the CUDA-emulated device feeds OpRecords, gets a Trace.

Eager mode is one kernel per op, back to back on one stream: each pays the launch overhead
(``launch_overhead_ns``, or ``graph_launch_overhead_ns`` when replayed from a CUDA graph) and
then ``max(compute, HBM)``. Views cost nothing. Host<->device transfers go over PCIe on the copy
engine. Records the NeuronCore device had to run on the host (``fallback``) are ordinary kernels
here: a real GPU runs them. A compiled kernel (``feed_kernel``) is one launch for its whole group.
"""
from __future__ import annotations

from backend.sim.descriptors import OpRecord
from backend.sim.gpu.cost import KernelCost, fused_cost, record_cost, transfer_ns
from backend.sim.gpu.presets import GpuConfig, get_gpu
from backend.sim.presets import DEFAULT_GPU_TARGET
from backend.sim.stream import StreamTimeline
from backend.sim.trace import OpSummary, Trace

__all__ = ["GpuSession", "GPU_ENGINES"]

GPU_ENGINES = ("tensor_core", "cuda_core", "hbm", "copy")


class GpuSession(StreamTimeline):
    """Accumulates one stream's kernels into a :class:`Trace` (device_kind ``"cuda"``)."""

    engines = GPU_ENGINES

    def __init__(self, preset: str | GpuConfig = DEFAULT_GPU_TARGET, max_events: int = 200_000,
                 graph_replay: bool = False) -> None:
        self.config = get_gpu(preset)
        self.max_events = max_events
        self.graph_replay = graph_replay
        self.reset()

    @property
    def launch_ns(self) -> float:
        cfg = self.config
        return cfg.graph_launch_overhead_ns if self.graph_replay else cfg.launch_overhead_ns

    @property
    def trace(self) -> Trace:
        return self._trace

    def reset(self) -> None:
        """Forget every op fed so far; the clock restarts at 0."""
        cfg = self.config
        self._trace = Trace(target=cfg.name, device_kind="cuda",
                            peak_flops_per_s=cfg.bf16_tensor_flops_per_s,
                            hbm_bytes_per_s=cfg.hbm_bytes_per_s,
                            max_events=self.max_events, engines=GPU_ENGINES)
        self._now_ns = 0.0

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, record: OpRecord) -> None:
        """Cost one eager op on the stream."""
        if record.transfer:
            # a copy pays the same host-side API overhead as a kernel launch
            self._feed_transfer(record, self.launch_ns)
        elif record.is_view:
            self._append(self._summary(record.name, "view", record, self._now_ns))
        else:
            self._feed_cost(record.name, "op", record, record_cost(self.config, record, self.launch_ns))

    def feed_kernel(self, name: str, records: list[OpRecord], internal_bytes_saved: int = 0,
                    nodes=(), source: str | None = None) -> None:
        """Cost one compiled kernel that runs ``records`` fused (views inside are free)."""
        work = [r for r in records if not r.is_view and not r.transfer]
        cost = fused_cost(self.config, work, self.launch_ns, internal_bytes_saved)
        self._label_kernel(self._feed_cost(name, "kernel", None, cost), work, nodes, source)

    # -- internals ---------------------------------------------------------------------------
    def copy_ns(self, nbytes: int) -> float:
        return transfer_ns(self.config, nbytes)

    def _feed_cost(self, name: str, kind: str, record: OpRecord | None, cost: KernelCost) -> OpSummary:
        summary = self._summary(name, kind, record, self._now_ns + cost.total_ns)
        summary.busy_ns.update(tensor_core=cost.tensor_ns, cuda_core=cost.cuda_ns, hbm=cost.memory_ns)
        summary.hbm_read_bytes = cost.hbm_read_bytes
        summary.hbm_write_bytes = cost.hbm_write_bytes
        summary.flops = cost.flops
        summary.instruction_count = 1
        # the kernel starts on the device once the launch overhead has passed
        start = self._now_ns + cost.launch_ns
        index = summary.op_index
        after_mma = self._event(start, cost.tensor_ns, "tensor_core", "mma", index,
                                flops=cost.tensor_flops)
        self._event(after_mma, cost.cuda_ns, "cuda_core", "simt", index,
                    flops=cost.flops - cost.tensor_flops)
        self._event(start, cost.memory_ns, "hbm", "hbm_stream", index,
                    cost.hbm_read_bytes + cost.hbm_write_bytes)
        return self._append(summary)
