"""Event downsampling keeps what it merges: counts, busy time, bytes, FLOPs, track order."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from workbench.aggregate import aggregate_events, busy_per_bin
from workbench.profiles import Profile
from wb_synth import transformer_trace


@pytest.mark.parametrize("limit", [10_000, 400, 120, 30])
def test_aggregation_conserves_totals_and_never_overlaps(limit):
    events = Profile(transformer_trace(4)).instructions
    agg, level = aggregate_events(events, limit)
    assert len(agg) <= limit
    assert (level == "instruction") == (limit >= len(events))
    assert agg["count"].sum() == len(events)
    assert agg["busy_ns"].sum() == pytest.approx(events["duration_ns"].sum())
    assert agg["bytes_moved"].sum() == events["bytes_moved"].sum()
    assert agg["flops"].sum() == events["flops"].sum()
    for _, rows in agg.groupby("engine"):
        assert (rows["start_ns"].to_numpy()[1:] >= rows["end_ns"].to_numpy()[:-1] - 1e-6).all()
        assert (rows["op_index"] <= rows["op_last"]).all()


def test_levels_coarsen_in_order():
    events = Profile(transformer_trace(4)).instructions
    levels = [aggregate_events(events, n)[1] for n in (len(events), len(events) - 1, 40)]
    assert levels[0] == "instruction" and levels[-1] == "bins"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 50)), min_size=1, max_size=40),
       st.integers(1, 12))
def test_busy_per_bin_matches_brute_force(spans, bins):
    starts = np.array([s for s, _ in spans])
    ends = starts + np.array([d for _, d in spans])
    edges = np.linspace(0, 1100, bins + 1)
    brute = [np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None).sum()
             for lo, hi in zip(edges[:-1], edges[1:])]
    assert busy_per_bin(starts, ends, edges) == pytest.approx(brute, abs=1e-6)
