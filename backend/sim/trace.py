"""The simulator's output: timed instruction events, per-op rollups and a summary.

Field names of the summary follow the Neuron profiler's JSON schema so numbers line up with
real profiles. Long runs stay bounded: instruction events beyond ``max_events`` are not kept
(they are counted in ``events_dropped``); past ``max_ops`` per-op rows fold into one aggregate
row per op name (``ops_folded``). Totals and the summary are always complete.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace

from backend.sim.overlap import WAIT_KIND, WAIT_OP, communication_breakdown

__all__ = ["InstructionEvent", "OpSummary", "Trace", "merge_traces", "engine_class", "ENGINE_CLASSES",
           "TRAFFIC_FIELDS"]

# Engine classes used for per-engine busy time. DMA queues are named "dma<q>" in events and
# rolled up as "dma". The GPU model uses "tensor_core", "cuda_core", "hbm" and "copy".
ENGINE_CLASSES = ("tensor", "vector", "scalar", "gpsimd", "dma", "host")
# Memory-traffic counters an OpSummary carries (and simulator instructions report), per level:
# HBM, and on chip SBUF and PSUM (NeuronCore) or L2 (GPU). Each level has its own bandwidth,
# so bytes are reported where they are served, never as HBM bytes when they are not.
TRAFFIC_FIELDS = ("hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
                  "psum_read_bytes", "psum_write_bytes", "l2_read_bytes", "l2_write_bytes")


def engine_class(engine: str) -> str:
    """Map an event's engine track name ("dma3", "tensor") to its class ("dma", "tensor")."""
    return "dma" if engine.startswith("dma") else engine


@dataclass(frozen=True, slots=True)
class InstructionEvent:
    start_ns: float
    end_ns: float
    engine: str        # track: "tensor", "vector", "scalar", "gpsimd", "dma0".."dma15", "host"
    opcode: str        # "nc_matmul", "activation", "dma_hbm_to_sbuf", ...
    op_index: int      # index of the OpSummary this instruction belongs to
    bytes_moved: int = 0
    flops: int = 0

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


_SUMMED_FIELDS = (*TRAFFIC_FIELDS, "flops", "instruction_count",
                  "hardware_flops", "spill_bytes", "launch_overhead_ns", "count")


@dataclass(slots=True)
class OpSummary:
    """Rollup of one eager op or one compiled kernel."""

    op_index: int
    name: str
    kind: str                       # "op", "kernel", "fallback", "transfer", "view"
    start_ns: float = 0.0
    end_ns: float = 0.0
    busy_ns: dict = field(default_factory=dict)   # engine class -> busy ns
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    sbuf_read_bytes: int = 0
    sbuf_write_bytes: int = 0
    psum_read_bytes: int = 0
    psum_write_bytes: int = 0
    flops: int = 0
    instruction_count: int = 0
    input_shapes: str = ""
    output_shapes: str = ""
    source: str | None = None
    nodes: tuple = ()               # FX node names for compiled kernels
    hardware_flops: int = 0         # FLOPs issued on the matrix unit (padding, transposes included)
    instruction_counts: dict = field(default_factory=dict)   # engine class -> hardware instructions
    sbuf_peak_bytes: int = 0        # on-chip footprint the lowering planned
    psum_peak_bytes: int = 0
    spill_bytes: int = 0            # fused-kernel intermediates that went to HBM and back
    prefetch_bytes: int = 0         # compiled kernel: input bytes loadable while the previous kernel runs
    launch_overhead_ns: float = 0.0
    count: int = 1                  # ops this row stands for (>1 once a long run is aggregated)
    folded_time_ns: float = 0.0     # folded rows: their ops' times summed (the span has gaps)
    # GPU: bytes served by L2, not HBM (last, so rows built positionally keep their fields)
    l2_read_bytes: int = 0
    l2_write_bytes: int = 0

    def absorb(self, other: "OpSummary") -> None:
        """Fold another op of the same name into this row (long runs stay bounded)."""
        self.folded_time_ns = self.time_ns + other.time_ns
        self.start_ns = min(self.start_ns, other.start_ns)
        self.end_ns = max(self.end_ns, other.end_ns)
        for name in _SUMMED_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mapping, extra in ((self.busy_ns, other.busy_ns), (self.instruction_counts, other.instruction_counts)):
            for key, value in extra.items():
                mapping[key] = mapping.get(key, 0) + value
        self.sbuf_peak_bytes = max(self.sbuf_peak_bytes, other.sbuf_peak_bytes)
        self.psum_peak_bytes = max(self.psum_peak_bytes, other.psum_peak_bytes)

    @property
    def time_ns(self) -> float:
        """The op's duration; for a folded row the sum of its ops' durations, not their span."""
        return self.folded_time_ns if self.count > 1 else self.end_ns - self.start_ns

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per HBM byte (0 when the op moves nothing)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else 0.0

    def to_record(self) -> dict:
        rec = asdict(self)
        busy = rec.pop("busy_ns")
        counts = rec.pop("instruction_counts")
        for cls in sorted(set(ENGINE_CLASSES) | set(busy)):
            rec[f"{cls}_busy_ns"] = float(busy.get(cls, 0.0))
        for cls in sorted(set(ENGINE_CLASSES) | set(counts)):
            rec[f"{cls}_instructions"] = int(counts.get(cls, 0))
        rec["time_ns"] = self.time_ns
        rec["hbm_bytes"] = self.hbm_bytes
        rec["arithmetic_intensity"] = self.arithmetic_intensity
        rec["nodes"] = ",".join(self.nodes)
        return rec


@dataclass(slots=True)
class Trace:
    """Everything one simulated run produced.

    ``peak_flops_per_s`` and ``hbm_bytes_per_s`` are the target's ceilings, used for MFU/MBU.
    ``hbm_timeline`` holds ``(time_ns, allocated_bytes)`` samples when the device reported them.
    """

    target: str
    device_kind: str = "neuron"          # "neuron" or "cuda"
    peak_flops_per_s: float = 0.0
    hbm_bytes_per_s: float = 0.0
    ops: list = field(default_factory=list)
    events_dropped: int = 0
    max_events: int = 200_000
    hbm_timeline: list = field(default_factory=list)
    engines: tuple = ()                  # engine tracks the target has, in display order
    max_ops: int = 50_000                # per-op rows kept; later ops fold into one row per name
    ops_folded: int = 0
    # Pipeline steps joined across their stages (``backend.sim.pipeline.PipelineTimeline``), each
    # placed at ``start_ns`` on this trace's clock; recorded by a fake world's schedule.step().
    pipelines: list = field(default_factory=list)
    _folded: dict = field(default_factory=dict)   # (name, kind) -> aggregate row
    # Kept events; the latest ops' may still wait in _shifted as (relative events, kept, start_ns,
    # op_index) and become InstructionEvents when ``events`` is first read.
    _events: list = field(default_factory=list, repr=False)
    _shifted: list = field(default_factory=list, repr=False, compare=False)
    _shifted_count: int = field(default=0, repr=False, compare=False)

    @property
    def events(self) -> list:
        """Kept instruction events in the order they were added (at most ``max_events``)."""
        if self._shifted:
            self._materialise()
        return self._events

    @events.setter
    def events(self, events: list) -> None:
        self._events, self._shifted, self._shifted_count = events, [], 0

    # -- building -------------------------------------------------------------------------
    def add_event(self, event: InstructionEvent) -> None:
        if self._shifted:
            self._materialise()
        if len(self._events) < self.max_events:
            self._events.append(event)
        else:
            self.events_dropped += 1

    def add_shifted(self, events: tuple, start_ns: float, op_index: int) -> None:
        """Add one op's events given relative to its start as ``(begin_ns, end_ns, engine, opcode,
        bytes_moved, flops)``; they are shifted by ``start_ns`` only when someone reads ``events``,
        so an op costs the same however many events it has."""
        kept = min(len(events), max(0, self.max_events - len(self._events) - self._shifted_count))
        if kept:
            self._shifted.append((events, kept, start_ns, op_index))
            self._shifted_count += kept
        self.events_dropped += len(events) - kept

    def _materialise(self) -> None:
        shifted, self._shifted, self._shifted_count = self._shifted, [], 0
        for events, kept, start_ns, op_index in shifted:
            self._events.extend([InstructionEvent(start_ns + begin, start_ns + end, engine, opcode, op_index, nbytes,
                                                  flops) for begin, end, engine, opcode, nbytes, flops in events[:kept]])

    def add_op(self, summary: OpSummary) -> OpSummary:
        """Append one op's rollup; past ``max_ops`` it is folded into a per-name aggregate row
        (totals stay exact, per-op detail is kept for the first ``max_ops`` ops)."""
        if len(self.ops) < self.max_ops:
            self.ops.append(summary)
            return summary
        self.ops_folded += 1
        key = (summary.name, summary.kind)
        row = self._folded.get(key)
        if row is None:
            row = self._folded[key] = OpSummary(
                op_index=len(self.ops), name=summary.name, kind=summary.kind,
                start_ns=summary.start_ns, end_ns=summary.end_ns, busy_ns=dict(summary.busy_ns),
                instruction_counts=dict(summary.instruction_counts), source="(aggregated)")
            for name in _SUMMED_FIELDS:
                setattr(row, name, getattr(summary, name))
            self.ops.append(row)
        else:
            row.absorb(summary)
        return summary

    def add_wait(self, start_ns: float, end_ns: float) -> OpSummary:
        """A row of the compute stream waiting for a collective (exposed communication); it
        stands for no op (``count`` 0)."""
        return self.add_op(OpSummary(op_index=len(self.ops), name=WAIT_OP, kind=WAIT_KIND,
                                     start_ns=start_ns, end_ns=end_ns, count=0))

    # -- reading --------------------------------------------------------------------------
    @property
    def total_time_ns(self) -> float:
        if not self.ops:
            return 0.0
        return max(op.end_ns for op in self.ops) - min(op.start_ns for op in self.ops)

    def busy_ns_by_engine_class(self) -> dict:
        busy: dict = defaultdict(float)
        for op in self.ops:
            for cls, ns in op.busy_ns.items():
                busy[cls] += ns
        return dict(busy)

    def summary(self) -> dict:
        """Whole-run metrics named like the Neuron profiler's summary."""
        total_ns = self.total_time_ns
        total_s = total_ns * 1e-9
        flops = sum(op.flops for op in self.ops)
        hbm_read = sum(op.hbm_read_bytes for op in self.ops)
        hbm_write = sum(op.hbm_write_bytes for op in self.ops)
        busy = self.busy_ns_by_engine_class()
        # DMA busy is summed over queues; report it as the share of queue-time in use.
        dma_tracks = max(1, sum(1 for e in self.engines if engine_class(e) == "dma"))

        def pct(ns: float, tracks: int = 1) -> float:
            return 100.0 * ns / (total_ns * tracks) if total_ns else 0.0

        mfu = 100.0 * flops / (self.peak_flops_per_s * total_s) if total_s and self.peak_flops_per_s else 0.0
        hw_flops = sum(op.hardware_flops or op.flops for op in self.ops)
        hfu = 100.0 * hw_flops / (self.peak_flops_per_s * total_s) if total_s and self.peak_flops_per_s else 0.0
        counts: dict = defaultdict(int)
        for op in self.ops:
            for cls, n in op.instruction_counts.items():
                counts[cls] += n
        mbu = 100.0 * (hbm_read + hbm_write) / (self.hbm_bytes_per_s * total_s) if total_s and self.hbm_bytes_per_s else 0.0
        tensor_busy = busy.get("tensor", busy.get("tensor_core", 0.0))
        out = {
            "target": self.target,
            "device_kind": self.device_kind,
            "total_time": total_s,
            "total_time_ns": total_ns,
            "op_count": sum(op.count for op in self.ops),
            # Views are bookkeeping, not work on the device: they launch nothing.
            "launch_count": sum(op.count for op in self.ops if op.kind != "view"),
            "fallback_count": sum(op.count for op in self.ops if op.kind == "fallback"),
            "instruction_count": sum(op.instruction_count for op in self.ops),
            "total_flops": flops,
            "mfu_estimated_percent": mfu,
            # HFU: FLOPs the matrix unit issued (tile padding, transposes and recompute included).
            "hfu_estimated_percent": hfu,
            "mbu_estimated_percent": mbu,
            "hbm_read_bytes": hbm_read,
            "hbm_write_bytes": hbm_write,
            "sbuf_read_bytes": sum(op.sbuf_read_bytes for op in self.ops),
            "sbuf_write_bytes": sum(op.sbuf_write_bytes for op in self.ops),
            "psum_read_bytes": sum(op.psum_read_bytes for op in self.ops),
            "psum_write_bytes": sum(op.psum_write_bytes for op in self.ops),
            "l2_read_bytes": sum(op.l2_read_bytes for op in self.ops),
            "l2_write_bytes": sum(op.l2_write_bytes for op in self.ops),
            "tensor_engine_active_time_percent": pct(tensor_busy),
            "vector_engine_active_time_percent": pct(busy.get("vector", busy.get("cuda_core", 0.0))),
            "scalar_engine_active_time_percent": pct(busy.get("scalar", 0.0)),
            "gpsimd_engine_active_time_percent": pct(busy.get("gpsimd", 0.0)),
            "dma_active_time_percent": pct(busy.get("dma", busy.get("hbm", 0.0)), dma_tracks if "dma" in busy else 1),
            "host_fallback_time_ns": busy.get("host", 0.0),
            "events_dropped": self.events_dropped,
            "ops_folded": self.ops_folded,
            "sbuf_peak_bytes": max((op.sbuf_peak_bytes for op in self.ops), default=0),
            "psum_peak_bytes": max((op.psum_peak_bytes for op in self.ops), default=0),
            "spill_bytes": sum(op.spill_bytes for op in self.ops),
            "launch_overhead_ns": sum(op.launch_overhead_ns for op in self.ops),
        }
        for cls in ENGINE_CLASSES:
            out[f"{cls}_instruction_count"] = counts.get(cls, 0)
        out.update({key[:-3]: ns * 1e-9 for key, ns in communication_breakdown(self.ops).items()})
        return out

    def to_records(self) -> list[dict]:
        """Per-op rollups as plain dicts (one row per op/kernel) for pandas and plotly."""
        return [op.to_record() for op in self.ops]

    def event_records(self) -> list[dict]:
        return [
            {"start_ns": e.start_ns, "end_ns": e.end_ns, "duration_ns": e.duration_ns,
             "engine": e.engine, "opcode": e.opcode, "op_index": e.op_index,
             "bytes_moved": e.bytes_moved, "flops": e.flops}
            for e in self.events
        ]

    def total_end_ns(self) -> float:
        return max((op.end_ns for op in self.ops), default=0.0)


def merge_traces(traces) -> Trace:
    """One Trace holding ``traces`` back to back (op indices renumbered); the inputs are left
    untouched, so a trace can be merged into several views."""
    traces = list(traces)
    if len(traces) == 1:
        return traces[0]
    first = traces[0]
    engines = list(first.engines)
    for t in traces[1:]:
        engines += [e for e in t.engines if e not in engines]
    merged = Trace(target=first.target, device_kind=first.device_kind,
                   peak_flops_per_s=first.peak_flops_per_s, hbm_bytes_per_s=first.hbm_bytes_per_s,
                   max_events=sum(t.max_events for t in traces), engines=tuple(engines))
    for t in traces:
        shift, base = merged.total_end_ns(), len(merged.ops)
        merged.ops.extend(replace(op, op_index=op.op_index + base, start_ns=op.start_ns + shift,
                                  end_ns=op.end_ns + shift, busy_ns=dict(op.busy_ns),
                                  instruction_counts=dict(op.instruction_counts)) for op in t.ops)
        merged.events.extend(InstructionEvent(e.start_ns + shift, e.end_ns + shift, e.engine, e.opcode,
                                              e.op_index + base, e.bytes_moved, e.flops) for e in t.events)
        merged.hbm_timeline.extend((ts + shift, nbytes) for ts, nbytes in t.hbm_timeline)
        merged.events_dropped += t.events_dropped
        merged.pipelines.extend(replace(p, start_ns=p.start_ns + shift) for p in t.pipelines)
    return merged
