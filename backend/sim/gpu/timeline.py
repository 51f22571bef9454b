"""A GPU timeline built op by op: the CUDA-emulated device feeds OpRecords, gets a Trace.

Eager mode is one kernel per op on one stream, launched asynchronously: the host spends the
launch overhead (``launch_overhead_ns``, or ``graph_launch_overhead_ns`` when replayed from a
CUDA graph) enqueuing each kernel while the device runs the earlier ones. Two clocks:

    host_ns  += launch_ns                        (kernel i is enqueued)
    start     = max(host_ns, device_ns)          (it waits for its launch and the stream)
    device_ns = start + max(compute, memory)

so a stream is launch-bound only where its kernels are shorter than the launch path. An op's
summary spans from the stream's previous end to its own end, so op times add up to the total
and a launch-bound gap is charged to the kernel that waited. Host<->device transfers (``.item()``
and ``.cpu()`` included) are synchronous in eager PyTorch: the copy runs on the copy engine
after the queue drains, and the host waits for it, so both clocks meet at its end. Views cost
nothing. Records the NeuronCore device had to run on the host (``fallback``) are ordinary
kernels here: a real GPU runs them. A compiled kernel (``feed_kernel``) is one launch for its
whole group.
"""
from __future__ import annotations

from backend.sim.descriptors import OpRecord
from backend.sim.gpu.cost import KernelCost, fused_cost, record_cost, transfer_ns
from backend.sim.gpu.presets import GpuConfig, get_gpu
from backend.sim.overlap import CollectiveLane, is_collective
from backend.sim.presets import DEFAULT_GPU_TARGET
from backend.sim.stream import StreamTimeline
from backend.sim.trace import OpSummary, Trace

__all__ = ["GpuSession", "GPU_ENGINES"]

GPU_ENGINES = ("tensor_core", "cuda_core", "hbm", "copy")


class GpuSession(StreamTimeline):
    """Accumulates one stream's kernels into a :class:`Trace` (device_kind ``"cuda"``)."""

    engines = GPU_ENGINES

    def __init__(self, preset: str | GpuConfig = DEFAULT_GPU_TARGET, max_events: int = 200_000,
                 graph_replay: bool = False, keep_workload: bool = False) -> None:
        self.config = get_gpu(preset)
        self.max_events = max_events
        self.graph_replay = graph_replay
        self.workload = [] if keep_workload else None
        self.reset()

    def _fresh(self, config) -> "GpuSession":
        return GpuSession(config, max_events=0, graph_replay=self.graph_replay)

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
        self._host_ns = 0.0      # when the host has finished enqueuing everything so far
        self._now_ns = 0.0       # when the stream has finished running everything so far
        self._lane = CollectiveLane()    # the NCCL stream

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, record: OpRecord) -> None:
        """Cost one eager op on the stream."""
        self._keep("feed", record)
        if self._await_collectives(record):
            return
        if is_collective(record.name):
            self._feed_collective(record, self._enqueue())      # launched like a kernel
        elif record.transfer:
            self._feed_copy(record)
        elif record.is_view:
            self._append(self._summary(record.name, "view", record, self._now_ns))
        else:
            self._feed_cost(record.name, "op", record, record_cost(self.config, record, self.launch_ns))

    def feed_kernel(self, name: str, records: list[OpRecord], internal_bytes_saved: int = 0,
                    nodes=(), source: str | None = None) -> None:
        """Cost one compiled kernel that runs ``records`` fused (views inside are free)."""
        self._keep("feed_kernel", name, records, internal_bytes_saved, nodes, source)
        work = [r for r in records if not r.is_view and not r.transfer]
        cost = fused_cost(self.config, work, self.launch_ns, internal_bytes_saved)
        self._label_kernel(self._feed_cost(name, "kernel", None, cost), work, nodes, source)

    # -- internals ---------------------------------------------------------------------------
    def copy_ns(self, nbytes: int) -> float:
        return transfer_ns(self.config, nbytes)

    def _enqueue(self) -> float:
        """Host enqueues one more launch; returns when the device may start it."""
        self._host_ns += self.launch_ns
        return max(self._host_ns, self._now_ns)

    def _feed_cost(self, name: str, kind: str, record: OpRecord | None, cost: KernelCost) -> OpSummary:
        start = self._enqueue()
        summary = self._summary(name, kind, record, start + cost.device_ns)
        summary.busy_ns.update(tensor_core=cost.tensor_ns, cuda_core=cost.cuda_ns, hbm=cost.memory_ns)
        summary.hbm_read_bytes, summary.hbm_write_bytes = cost.hbm_read_bytes, cost.hbm_write_bytes
        summary.l2_read_bytes, summary.l2_write_bytes = cost.l2_read_bytes, cost.l2_write_bytes
        summary.flops = cost.flops
        summary.instruction_count = 1
        index = summary.op_index
        after_mma = self._event(start, cost.tensor_ns, "tensor_core", "mma", index,
                                flops=cost.tensor_flops)
        self._event(after_mma, cost.cuda_ns, "cuda_core", "simt", index,
                    flops=cost.flops - cost.tensor_flops)
        self._event(start, cost.memory_ns, "hbm", "l2_stream" if cost.l2_hit else "hbm_stream",
                    index, cost.read_bytes + cost.write_bytes)
        return self._append(summary)

    def _feed_copy(self, record: OpRecord) -> None:
        # a copy pays the same host-side API overhead as a kernel launch, then waits for the
        # queue to drain; the host blocks until it is done
        self._feed_transfer(record, self._enqueue())
        self._host_ns = self._now_ns
