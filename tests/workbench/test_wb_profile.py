"""Profile tables and counters, on synthetic transformer traces."""
from __future__ import annotations

import pandas as pd
import pytest

from backend.sim.trace import Trace, merge_traces
from workbench.profiles import Profile
from wb_synth import NEURON_ENGINES, transformer_trace


def test_ops_and_instructions_match_the_trace_records(small_trace):
    prof = Profile(small_trace)
    assert len(prof.ops) == len(small_trace.ops)
    assert set(small_trace.to_records()[0]) <= set(prof.ops.columns)
    expected = pd.DataFrame(small_trace.event_records())
    pd.testing.assert_frame_equal(prof.instructions, expected[list(prof.instructions.columns)], check_dtype=False)


def test_timeline_has_one_table_per_engine_in_display_order(small_trace):
    prof = Profile(small_trace)
    tracks = list(prof.timeline)
    assert tracks == [e for e in NEURON_ENGINES if e in tracks]
    assert {"tensor", "vector", "scalar", "gpsimd", "host", "dma0"} <= set(tracks)
    assert sum(len(t) for t in prof.timeline.values()) == len(small_trace.events)
    assert (prof.timeline["tensor"]["opcode"] == "nc_matmul").all()


def test_summary_uses_profiler_names_and_adds_graph_counts(small_trace):
    prof = Profile(small_trace, graphs=[{"name": "g", "nodes": [{"name": "a"}], "graph_breaks": ["x", "y"]}],
                   meta={"wall_time_s": 0.5})
    s = prof.summary
    assert s["total_time"] == pytest.approx(small_trace.total_time_ns * 1e-9)
    assert s["graph_count"] == 1 and s["graph_break_count"] == 2
    assert s["host_wall_time"] == 0.5
    assert "tensor_engine_active_time_percent" in s and "mfu_estimated_percent" in s


def test_memory_counters_sum_the_ops_and_find_the_peak(small_trace):
    mem = Profile(small_trace).memory
    assert mem["hbm_read_bytes"] == sum(op.hbm_read_bytes for op in small_trace.ops)
    assert mem["psum_write_bytes"] == sum(op.psum_write_bytes for op in small_trace.ops)
    assert mem["hbm_peak_allocated_bytes"] == max(b for _, b in small_trace.hbm_timeline)
    assert list(mem["hbm_timeline"].columns) == ["time_ns", "allocated_bytes"]


def test_fallbacks_counts_and_costs_per_op_name(small_trace):
    fb = Profile(small_trace).fallbacks
    ops = [op for op in small_trace.ops if op.kind == "fallback"]
    assert list(fb["name"]) == ["aten::_unique2"]
    assert fb.loc[0, "count"] == len(ops) == 2
    assert fb.loc[0, "time_ns"] == pytest.approx(sum(op.time_ns for op in ops))
    assert fb.loc[0, "host_busy_ns"] == pytest.approx(sum(op.busy_ns["host"] for op in ops))
    assert fb.loc[0, "sources"] == "model.py:33"


def test_merge_traces_appends_without_touching_inputs():
    a, b = transformer_trace(1), transformer_trace(1)
    a_first, b_first = a.ops[0].start_ns, b.ops[0].start_ns
    merged = merge_traces([a, b])
    assert len(merged.ops) == len(a.ops) + len(b.ops)
    assert [op.op_index for op in merged.ops] == list(range(len(merged.ops)))
    assert merged.ops[len(a.ops)].start_ns == pytest.approx(a.total_end_ns() + b_first)
    assert a.ops[0].start_ns == a_first and b.ops[0].op_index == 0 and b.ops[0].start_ns == b_first
    assert Profile([a, b]).summary["op_count"] == len(merged.ops)
    # the merged rows own their per-engine dicts: changing them leaves the inputs as they were
    merged.ops[0].busy_ns["tensor"] = merged.ops[0].instruction_counts["tensor"] = -1
    assert a.ops[0].busy_ns.get("tensor") != -1 and a.ops[0].instruction_counts.get("tensor") != -1


def test_merge_is_the_one_way_to_join_traces():
    assert not hasattr(Trace, "extend")      # it renumbered the other trace's rows in place


def test_empty_profile_has_tables_with_columns():
    prof = Profile(meta={"target": "trn2"})
    assert prof.summary["op_count"] == 0
    assert "input_shapes" in prof.ops.columns and len(prof.fallbacks) == 0
    assert prof.trace.target == "trn2"


def test_repr_html_is_a_compact_summary_table(small_trace):
    text = Profile(small_trace)._repr_html_()
    assert text.startswith("<table") and "simulated time" in text and "MFU" in text and "host fallbacks" in text


def test_gpu_traces_relabel_engine_rows():
    from workbench.format import summary_rows
    rows = dict(summary_rows(Trace(target="h100", device_kind="cuda").summary()))
    assert "tensor cores active" in rows and "ScalarE active" not in rows


def test_a_band_shows_beside_the_simulated_time():
    from workbench.format import summary_rows
    rows = dict(summary_rows({"total_time": 7.1e-3, "total_time_low": 6.2e-3, "total_time_high": 8.3e-3,
                              "band_dominant": "trn2.dma_issue_ns"}))
    assert rows["simulated time"] == "7.1 ms (6.2 ms-8.3 ms)"
    assert rows["band set mostly by"] == "trn2.dma_issue_ns"
    assert dict(summary_rows({"total_time": 7.1e-3}))["simulated time"] == "7.1 ms"
