"""Downsampling of instruction events for display and for compact trace files.

A GPT-2-small step is ~300k instruction events; a browser draws ~20k bars comfortably. Events
are merged per track in coarsening steps until they fit, and each merged row keeps what it
stands for (instruction count, busy time, bytes, FLOPs, first/last op):

1. runs of the same op and opcode on a track,
2. runs of the same op on a track,
3. fixed time bins per track.

Each engine is an in-order stream, so merged spans on one track never overlap.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["aggregate_events", "busy_per_bin", "AGGREGATE_COLUMNS"]

AGGREGATE_COLUMNS = ("start_ns", "end_ns", "engine", "opcode", "op_index", "op_last", "count",
                     "busy_ns", "bytes_moved", "flops")
MIXED = "(mixed)"


def _as_aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.loc[:, ["start_ns", "end_ns", "engine", "opcode", "op_index", "bytes_moved", "flops"]].copy()
    out["op_last"] = out["op_index"]
    out["count"] = np.ones(len(out), dtype=np.int64)
    out["busy_ns"] = out["end_ns"] - out["start_ns"]
    out = out.sort_values(["engine", "start_ns"], kind="stable", ignore_index=True)
    return out.loc[:, list(AGGREGATE_COLUMNS)]


def _merge_runs(agg: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Merge consecutive rows of one track that share ``key``."""
    if not len(agg):
        return agg
    engine_codes = pd.factorize(agg["engine"])[0]
    new = np.ones(len(agg), dtype=bool)
    new[1:] = (engine_codes[1:] != engine_codes[:-1]) | (key[1:] != key[:-1])
    idx = np.flatnonzero(new)
    opcode_codes, opcode_names = pd.factorize(agg["opcode"])
    same = np.minimum.reduceat(opcode_codes, idx) == np.maximum.reduceat(opcode_codes, idx)
    opcode = np.where(same, np.asarray(opcode_names, dtype=object)[opcode_codes[idx]], MIXED)
    return pd.DataFrame({
        "start_ns": agg["start_ns"].to_numpy()[idx],
        "end_ns": np.maximum.reduceat(agg["end_ns"].to_numpy(), idx),
        "engine": agg["engine"].to_numpy()[idx],
        "opcode": opcode,
        "op_index": np.minimum.reduceat(agg["op_index"].to_numpy(), idx),
        "op_last": np.maximum.reduceat(agg["op_last"].to_numpy(), idx),
        "count": np.add.reduceat(agg["count"].to_numpy(), idx),
        "busy_ns": np.add.reduceat(agg["busy_ns"].to_numpy(), idx),
        "bytes_moved": np.add.reduceat(agg["bytes_moved"].to_numpy(), idx),
        "flops": np.add.reduceat(agg["flops"].to_numpy(), idx),
    })


def aggregate_events(events: pd.DataFrame, max_events: int) -> tuple[pd.DataFrame, str]:
    """Rows of ``AGGREGATE_COLUMNS``, at most ``max_events`` of them, and the level used.

    Level is "instruction" (nothing merged), "op+opcode", "op" or "bins".
    """
    max_events = max(1, int(max_events))
    agg = _as_aggregate(events)
    if len(agg) <= max_events:
        return agg, "instruction"
    op_codes = agg["op_index"].to_numpy()
    opcode_codes = pd.factorize(agg["opcode"])[0]
    agg = _merge_runs(agg, op_codes * (opcode_codes.max() + 1) + opcode_codes)
    if len(agg) <= max_events:
        return agg, "op+opcode"
    agg = _merge_runs(agg, agg["op_index"].to_numpy())
    if len(agg) <= max_events:
        return agg, "op"
    tracks = agg["engine"].nunique()
    bins_per_track = max(1, max_events // tracks - 1)
    t0, t1 = agg["start_ns"].min(), agg["end_ns"].max()
    width = max((t1 - t0) / bins_per_track, 1e-9)
    bins = np.floor((agg["start_ns"].to_numpy() - t0) / width).astype(np.int64)
    return _merge_runs(agg, bins), "bins"


def busy_per_bin(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy ns of events [start, end) falling in each bin between consecutive ``edges``.

    Uses busy-so-far(t) = sum(max(t - start, 0)) - sum(max(t - end, 0)), evaluated at the edges
    with sorted prefix sums, so it costs O((events + bins) log events).
    """
    def ramp(points: np.ndarray) -> np.ndarray:
        points = np.sort(points)
        prefix = np.concatenate([[0.0], np.cumsum(points)])
        n = np.searchsorted(points, edges, side="left")
        return n * edges - prefix[n]

    so_far = ramp(np.asarray(starts, dtype=np.float64)) - ramp(np.asarray(ends, dtype=np.float64))
    return np.diff(so_far)
