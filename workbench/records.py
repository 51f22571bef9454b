"""Plain-data round trip of a Trace: header dict, op records and event rows back into a Trace.

Files (Chrome trace, CSV/Parquet folders) store ``Trace.to_records()`` rows and a header; these
functions rebuild the dataclasses so a loaded Profile behaves like a fresh one.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, fields

from backend.sim.trace import InstructionEvent, OpSummary, Trace

__all__ = ["trace_header", "op_from_record", "trace_from_parts", "json_safe", "check_columns",
           "OP_COLUMNS"]

# Columns without which op records cannot be read back.
OP_COLUMNS = ("op_index", "name", "kind", "start_ns", "end_ns")

# Dict fields of OpSummary flatten into one column per engine class with these suffixes.
_DICT_SUFFIXES = {"busy_ns": "_busy_ns", "instruction_counts": "_instructions"}


def trace_header(trace: Trace) -> dict:
    """Everything of a Trace except its ops and events."""
    return {"target": trace.target, "device_kind": trace.device_kind,
            "peak_flops_per_s": trace.peak_flops_per_s, "hbm_bytes_per_s": trace.hbm_bytes_per_s,
            "engines": list(trace.engines), "max_events": trace.max_events,
            "events_dropped": trace.events_dropped, "ops_folded": trace.ops_folded,
            "hbm_timeline": [[float(t), int(b)] for t, b in trace.hbm_timeline]}


def check_columns(columns, required, where) -> None:
    """Raise ValueError naming ``where`` and the ``required`` columns that ``columns`` lacks."""
    missing = [c for c in required if c not in set(columns)]
    if missing:
        raise ValueError(f"{where}: missing column(s) {', '.join(missing)} (found: {', '.join(map(str, columns))}); "
                         "not a table written by the workbench, or a damaged one")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _column_dict(rec: dict, suffix: str, cast) -> dict:
    return {key[:-len(suffix)]: cast(value) for key, value in rec.items()
            if key.endswith(suffix) and not _missing(value) and value}


def _field_value(f, rec: dict):
    """Read dataclass field ``f`` back from a record, by its annotation (the schema may grow)."""
    if f.name in _DICT_SUFFIXES:
        return _column_dict(rec, _DICT_SUFFIXES[f.name], float if f.name == "busy_ns" else int)
    if f.name not in rec:          # a column older files lack: the field's own default
        return f.default if f.default is not MISSING else f.default_factory()
    value = rec[f.name]
    if f.name == "nodes":
        return tuple(n for n in str(value).split(",") if n) if not _missing(value) else ()
    kind = str(f.type)
    if "None" in kind:
        return None if _missing(value) or value == "" else str(value)
    if kind == "int":
        return 0 if _missing(value) else int(value)
    if kind == "float":
        return 0.0 if _missing(value) else float(value)
    if kind == "str":
        return "" if _missing(value) else str(value)
    return f.default if f.default is not MISSING else f.default_factory()


def op_from_record(rec: dict) -> OpSummary:
    """Inverse of ``OpSummary.to_record`` (tolerates CSV's NaN for empty strings)."""
    return OpSummary(**{f.name: _field_value(f, rec) for f in fields(OpSummary)})


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
                  ops_folded=int(header.get("ops_folded") or 0),
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
