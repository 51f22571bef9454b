"""Plain-data round trip of a Trace: header dict, op records and event rows back into a Trace.

Files (Chrome trace, CSV/Parquet folders) store ``Trace.to_records()`` rows and a header; these
functions rebuild the dataclasses so a loaded Profile behaves like a fresh one.
"""
from __future__ import annotations

import math

from backend.sim.trace import InstructionEvent, OpSummary, Trace

__all__ = ["trace_header", "op_from_record", "trace_from_parts", "json_safe"]

_INT_FIELDS = ("hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
               "psum_read_bytes", "psum_write_bytes", "flops", "instruction_count")


def trace_header(trace: Trace) -> dict:
    """Everything of a Trace except its ops and events."""
    return {"target": trace.target, "device_kind": trace.device_kind,
            "peak_flops_per_s": trace.peak_flops_per_s, "hbm_bytes_per_s": trace.hbm_bytes_per_s,
            "engines": list(trace.engines), "max_events": trace.max_events,
            "events_dropped": trace.events_dropped,
            "hbm_timeline": [[float(t), int(b)] for t, b in trace.hbm_timeline]}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def op_from_record(rec: dict) -> OpSummary:
    """Inverse of ``OpSummary.to_record`` (tolerates CSV's NaN for empty strings)."""
    busy = {key[:-len("_busy_ns")]: float(value) for key, value in rec.items()
            if key.endswith("_busy_ns") and not _missing(value) and float(value)}
    nodes = rec.get("nodes")
    text = {key: ("" if _missing(rec.get(key)) else str(rec.get(key))) for key in ("input_shapes", "output_shapes")}
    return OpSummary(
        op_index=int(rec["op_index"]), name=str(rec["name"]), kind=str(rec["kind"]),
        start_ns=float(rec["start_ns"]), end_ns=float(rec["end_ns"]), busy_ns=busy,
        **{key: int(rec.get(key) or 0) for key in _INT_FIELDS},
        **text,
        source=None if _missing(rec.get("source")) or rec.get("source") == "" else str(rec["source"]),
        nodes=tuple(n for n in str(nodes).split(",") if n) if not _missing(nodes) else ())


def trace_from_parts(header: dict, op_records, event_rows) -> Trace:
    """A Trace from a header, op records and ``(start, end, engine, opcode, op, bytes, flops)`` rows."""
    events = [InstructionEvent(float(s), float(e), str(eng), str(code), int(op), int(nbytes), int(fl))
              for s, e, eng, code, op, nbytes, fl in event_rows]
    trace = Trace(target=str(header.get("target", "")), device_kind=str(header.get("device_kind", "neuron")),
                  peak_flops_per_s=float(header.get("peak_flops_per_s") or 0.0),
                  hbm_bytes_per_s=float(header.get("hbm_bytes_per_s") or 0.0),
                  max_events=max(int(header.get("max_events") or 0), len(events)),
                  engines=tuple(header.get("engines") or ()),
                  events_dropped=int(header.get("events_dropped") or 0),
                  hbm_timeline=[(float(t), int(b)) for t, b in header.get("hbm_timeline") or ()])
    trace.ops = [op_from_record(rec) for rec in op_records]
    trace.events = events
    return trace


def json_safe(value):
    """Plain JSON types for meta/summary values (numpy scalars, tuples, NaN -> None)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
