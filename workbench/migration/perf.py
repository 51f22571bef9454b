"""Op coverage and performance of the migration report, from recorded steps.

Coverage: every aten op of the steady-state eager step, whether the NeuronCore lowering ran it
or it fell back to the host (its simulated time includes the transfers down and back), with
calls, phases (forward, backward, optimizer) and time. Performance: simulated step time and MFU
on the target and on the baseline GPU for each recorded mode, and where the NeuronCore's time
went (engine classes busy, DMA, host fallbacks, launch overhead).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from backend.sim.trace import Trace
from workbench.migration.run import PHASES, StepRecording
from workbench.pricing import COST_COLUMNS, cost_columns

__all__ = ["coverage_table", "performance_table", "time_breakdown", "COVERAGE_COLUMNS", "PERFORMANCE_COLUMNS",
           "BREAKDOWN_COLUMNS", "STATUS"]

COVERAGE_COLUMNS = ("op", "status", "calls", "phases", "time_ns", "percent_of_step", "host_busy_ns",
                    "fallback_time_ns", "hbm_bytes", "sources")
PERFORMANCE_COLUMNS = ("label", "device", "target", "mode", "step_time_s", "relative_to_baseline_eager",
                       "mfu_percent", "hbm_bytes", "op_count", "fallback_count", "fallback_time_s", "role",
                       "time_kind", *COST_COLUMNS)
BREAKDOWN_COLUMNS = ("mode", "where", "time_ns", "percent_of_step", "note")
# trace op kind -> what it means for a migration
STATUS = {"op": "lowered", "kernel": "lowered (fused)", "fallback": "host fallback",
          "view": "view (no device work)", "transfer": "host<->device transfer"}
_MAX_SOURCES = 3
_OWN_DIR = str(Path(__file__).resolve().parent)


def _user_source(source: str | None) -> str:
    """The recorded source line unless it is the report's own step runner (models built from
    torch modules only, like nn.Sequential, have no user line below it)."""
    return "" if not source or source.startswith(_OWN_DIR) else source


def coverage_table(rec: StepRecording) -> pd.DataFrame:
    """One row per (aten op, status) of the recorded step, costliest first."""
    total = rec.neuron.total_time_ns or 1.0
    groups: dict = {}
    for op in rec.neuron.ops:
        row = groups.get((op.name, op.kind))
        if row is None:
            row = groups[(op.name, op.kind)] = {"op": op.name, "status": STATUS.get(op.kind, op.kind), "calls": 0,
                                                "phases": set(), "time_ns": 0.0, "host_busy_ns": 0.0,
                                                "hbm_bytes": 0, "sources": set()}
        row["calls"] += 1
        row["phases"].add(rec.phase_of(op.op_index))
        row["time_ns"] += op.time_ns
        row["host_busy_ns"] += op.busy_ns.get("host", 0.0)
        row["hbm_bytes"] += op.hbm_bytes
        if op.kind == "fallback" and _user_source(op.source):
            row["sources"].add(op.source)
    rows = []
    for (_, kind), row in groups.items():
        row["phases"] = ",".join(p for p in PHASES if p in row["phases"])
        row["percent_of_step"] = 100.0 * row["time_ns"] / total
        row["fallback_time_ns"] = row["time_ns"] if kind == "fallback" else 0.0
        row["sources"] = ", ".join(sorted(row["sources"])[:_MAX_SOURCES])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(COVERAGE_COLUMNS))
    return frame.sort_values(["fallback_time_ns", "time_ns"], ascending=False, ignore_index=True)


def _fallback_ns(trace: Trace) -> float:
    return sum(op.time_ns for op in trace.ops if op.kind == "fallback")


def performance_table(recordings: list[StepRecording], target: str, baseline: str, *, target_device: str = "neuron",
                      baseline_device: str = "cuda", items_per_step: float | None = None,
                      unit: str = "tokens") -> pd.DataFrame:
    """Simulated time per step on the target and the baseline, per recorded mode, with what a
    step costs on one device of the instance holding each (``items_per_step`` tokens or samples:
    USD per 1M of them and how many one USD buys)."""
    eager_gpu = next((r.baseline.total_time_ns for r in recordings if r.mode == "eager"), 0.0)
    rows = []
    for rec in recordings:
        for role, device, name, trace in (("target", target_device, target, rec.target_trace),
                                          ("baseline", baseline_device, baseline, rec.baseline)):
            s = trace.summary()
            rows.append({"label": f"{name} {rec.mode}", "device": device, "target": name, "mode": rec.mode,
                         "step_time_s": s["total_time"],
                         "relative_to_baseline_eager": s["total_time_ns"] / eager_gpu if eager_gpu else float("nan"),
                         "mfu_percent": s["mfu_estimated_percent"],
                         "hbm_bytes": s["hbm_read_bytes"] + s["hbm_write_bytes"], "op_count": s["op_count"],
                         "fallback_count": s["fallback_count"], "fallback_time_s": _fallback_ns(trace) * 1e-9,
                         "role": role, "time_kind": "simulated",
                         **cost_columns(s["total_time"], name, items_per_step, unit)})
    return pd.DataFrame(rows, columns=list(PERFORMANCE_COLUMNS))


_ENGINES = (("tensor", "TensorE busy", "tensor_engine_active_time_percent", "matmuls, transposes"),
            ("vector", "VectorE busy", "vector_engine_active_time_percent", "elementwise, reductions, norms"),
            ("scalar", "ScalarE busy", "scalar_engine_active_time_percent", "activations"),
            ("gpsimd", "GpSimdE busy", "gpsimd_engine_active_time_percent", "gathers, iota, masks"),
            ("dma", "DMA queues busy", "dma_active_time_percent", "summed over queues; % of queue-time"))


def time_breakdown(recordings: list[StepRecording]) -> pd.DataFrame:
    """Where the NeuronCore's step time went, per mode. Engines overlap, so rows do not add up."""
    rows = []
    for rec in recordings:
        trace = rec.neuron
        s, busy = trace.summary(), trace.busy_ns_by_engine_class()
        total = s["total_time_ns"] or 1.0
        for cls, label, pct_key, note in _ENGINES:
            rows.append((rec.mode, label, busy.get(cls, 0.0), s[pct_key], note))
        fallback = _fallback_ns(trace)
        rows.append((rec.mode, "host fallbacks", fallback, 100.0 * fallback / total,
                     "ops run on the host, transfers down and back included"))
        rows.append((rec.mode, "launch overhead", s["launch_overhead_ns"], 100.0 * s["launch_overhead_ns"] / total,
                     "per-op (eager) or per-kernel (compiled) dispatch"))
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS))
