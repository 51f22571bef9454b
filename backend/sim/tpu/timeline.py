"""A TPU timeline: OpRecords in, a Trace out, costed as the compiled XLA program would run.

TPUs always run compiled, so this timeline assumes the compiled path even for ops fed one by
one: consecutive ops are grouped into XLA-style fusions (``fusion.py``) and each fusion costs
``fusion_overhead_ns + max(MXU + VPU, HBM)`` (``cost.py``); there is no per-op host launch. A
fusion is costed when it closes (the next MXU op, a transfer or a compiled kernel). Reading
``trace`` shows the running fusion as if closed, and takes it back if the next op joins it, so a
reader that looks after every op (the workbench's memory sampler) changes nothing. Compiled
kernels fed by ``feed_kernel`` are one fusion each. Views cost nothing (inside a fusion their rows
follow it); host<->chip transfers go over the host link on the ``copy`` track. Collectives run
on their own lane, priced on the topology the process group names (a slice's ICI torus from
``backend.sim.tpu.collectives.slice_topology``), beside the fusions.

Tracks use the engine classes the Trace summary understands: ``tensor`` is the MXUs, ``vector``
the VPU, ``hbm`` the memory stream, ``copy`` the host link.
"""
from __future__ import annotations

from backend.sim.descriptors import OpRecord
from backend.sim.overlap import WAIT_OP, WAITS_FOR, CollectiveLane, is_collective
from backend.sim.presets import DEFAULT_TPU_TARGET
from backend.sim.tpu.cost import FusionCost, fused_cost, transfer_ns
from backend.sim.tpu.fusion import PendingFusion
from backend.sim.tpu.presets import TpuConfig, get_tpu
from backend.sim.stream import StreamTimeline, describe_shapes
from backend.sim.trace import OpSummary, Trace

__all__ = ["TpuSession", "TPU_ENGINES", "COMPILED_PATH_NOTE"]

TPU_ENGINES = ("tensor", "vector", "hbm", "copy")
COMPILED_PATH_NOTE = ("TPU timing assumes the compiled (XLA) path: ops are grouped into fusions "
                      "with no per-op launch, as TPUs run whole-graph compiled programs")


class TpuSession(StreamTimeline):
    """Accumulates fusions into a :class:`Trace` (device_kind ``"tpu"``)."""

    engines = TPU_ENGINES

    def __init__(self, preset: str | TpuConfig = DEFAULT_TPU_TARGET, max_events: int = 200_000,
                 keep_workload: bool = False) -> None:
        self.config = get_tpu(preset)
        self.max_events = max_events
        self.workload = [] if keep_workload else None
        self.reset()

    def _fresh(self, config) -> "TpuSession":
        return TpuSession(config, max_events=0)

    @property
    def trace(self) -> Trace:
        """The trace so far, the running fusion included (it stays open to the next op)."""
        if self._pending:
            t = self._trace
            mark = (len(t.ops), len(t.events), t.events_dropped, t.ops_folded, self._now_ns)
            pending = self._pending
            self._close_fusion()
            self._shown = (pending, mark)
        return self._trace

    def reset(self) -> None:
        """Forget every op fed so far; the clock restarts at 0."""
        cfg = self.config
        self._trace = Trace(target=cfg.name, device_kind="tpu", peak_flops_per_s=cfg.bf16_flops_per_s,
                            hbm_bytes_per_s=cfg.hbm_bytes_per_s, max_events=self.max_events,
                            engines=TPU_ENGINES)
        self._now_ns = 0.0
        self._pending = PendingFusion()
        self._shown: tuple | None = None     # the fusion ``trace`` closed for a reader, and where
        self._lane = CollectiveLane()

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, record: OpRecord) -> None:
        """Add one op to the running fusion (or cost it, for transfers and views)."""
        self._keep("feed", record)
        self._reopen()
        if record.name == WAIT_OP or WAITS_FOR in record.attrs or is_collective(record.name):
            self._close_fusion()               # what came before is the data the collective moves
            if self._await_collectives(record):
                return
        if is_collective(record.name):
            self._feed_collective(record, self._now_ns)
        elif record.transfer:
            self._close_fusion()
            self._feed_transfer(record, self._now_ns)
        elif record.is_view:
            if self._pending:
                self._pending.pass_view(record)
            else:
                self._append(self._summary(record.name, "view", record, self._now_ns))
        else:
            if not self._pending.accepts(record):
                self._close_fusion()
            self._pending.add(record)

    def feed_kernel(self, name: str, records: list[OpRecord], internal_bytes_saved: int = 0,
                    nodes=(), source: str | None = None) -> None:
        """Cost one compiled kernel as one fusion (views inside are free)."""
        self._keep("feed_kernel", name, records, internal_bytes_saved, nodes, source)
        self._reopen()
        self._close_fusion()
        work = [r for r in records if not r.is_view and not r.transfer]
        cost = fused_cost(self.config, work, internal_bytes_saved)
        self._label_kernel(self._feed_cost(name, "kernel", None, cost), work, nodes, source)

    # -- internals ---------------------------------------------------------------------------
    def _reopen(self) -> None:
        """Take back the fusion ``trace`` closed for a reader, so the next op may still join it."""
        if self._shown is None:
            return
        (pending, (n_ops, n_events, dropped, folded, now)), self._shown = self._shown, None
        t = self._trace
        if t.ops_folded != folded:      # rows folded into per-name aggregates cannot be taken back
            return
        del t.ops[n_ops:], t.events[n_events:]
        t.events_dropped, self._now_ns, self._pending = dropped, now, pending

    def _close_fusion(self) -> None:
        pending, self._pending = self._pending, PendingFusion()
        if not pending:
            return
        records = pending.records
        cost = fused_cost(self.config, records, pending.internal_bytes_saved)
        if len(records) == 1:
            self._feed_cost(records[0].name, "op", records[0], cost)
        else:
            summary = self._feed_cost(f"fusion({records[0].name} +{len(records) - 1})", "kernel",
                                      records[0], cost)
            summary.nodes = tuple(r.name for r in records)
            summary.output_shapes = describe_shapes(records[-1].outputs)
        for view in pending.views:
            self._append(self._summary(view.name, "view", view, self._now_ns))

    def copy_ns(self, nbytes: int) -> float:
        return transfer_ns(self.config, nbytes)

    def _feed_cost(self, name: str, kind: str, record: OpRecord | None, cost: FusionCost) -> OpSummary:
        summary = self._summary(name, kind, record, self._now_ns + cost.total_ns)
        summary.busy_ns.update(tensor=cost.mxu_ns, vector=cost.vpu_ns, hbm=cost.memory_ns)
        summary.hbm_read_bytes = cost.hbm_read_bytes
        summary.hbm_write_bytes = cost.hbm_write_bytes
        summary.flops = cost.flops
        summary.hardware_flops = cost.padded_flops + (cost.flops - cost.mxu_flops)
        summary.launch_overhead_ns = cost.overhead_ns
        summary.instruction_count = 1
        start = self._now_ns + cost.overhead_ns
        index = summary.op_index
        after_mxu = self._event(start, cost.mxu_ns, "tensor", "mxu_matmul", index, flops=cost.mxu_flops)
        self._event(after_mxu, cost.vpu_ns, "vector", "vpu_elementwise", index,
                    flops=cost.flops - cost.mxu_flops)
        self._event(start, cost.memory_ns, "hbm", "hbm_stream", index,
                    cost.hbm_read_bytes + cost.hbm_write_bytes)
        return self._append(summary)
