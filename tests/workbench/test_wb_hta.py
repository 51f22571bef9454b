"""Chrome traces load into Holistic Trace Analysis (HTA): kernels with stream and correlation
ids, and ``distributedInfo`` as HTA's parser reads them.

Without the ``holistictraceanalysis`` package the fields its parser relies on are checked
(hta/common/trace_parser.py, trace_filter.py, trace.py); with it, its analyses run on the file.
"""
from __future__ import annotations

import json

import pytest

from wb_synth import transformer_trace
from workbench.export import chrome_trace_dict
from workbench.profiles import Profile


@pytest.fixture
def trace_dict(small_trace):
    return chrome_trace_dict(Profile(small_trace))


def test_distributed_info_has_what_hta_reads(trace_dict):
    info = trace_dict["distributedInfo"]
    assert isinstance(info["rank"], int) and info["world_size"] >= 1 and isinstance(info["backend"], str)


def test_device_events_are_kernels_on_streams_linked_to_their_ops(trace_dict):
    spans = [e for e in trace_dict["traceEvents"] if e["ph"] == "X"]
    # HTA drops events without dur/cat; its GPU-kernel filter is stream >= 0 and correlation >= 0,
    # and only streams > 0 inherit their op's iteration.
    assert all(e.get("cat") and "dur" in e and isinstance(e["name"], str) for e in spans)
    kernels = [e for e in spans if e["pid"] == 1]
    ops = [e for e in spans if e["pid"] == 2]
    assert kernels and all(e["cat"] == "kernel" for e in kernels)
    assert all(isinstance(e["args"]["stream"], int) and e["args"]["stream"] > 0 for e in kernels)
    # Host-side spans carry no stream (HTA defaults it to -1) and the correlation of their kernels.
    assert all("stream" not in e["args"] for e in ops)
    op_ids = {e["args"]["correlation"] for e in ops}
    assert all(e["args"]["correlation"] > 0 for e in kernels)
    assert {e["args"]["correlation"] for e in kernels} <= op_ids
    for e in kernels:
        assert e["args"]["correlation"] == e["args"]["op_index"] + 1


def test_hta_analyses_run_on_the_exported_trace(tmp_path):
    # At least 128 ops: HTA 0.5.0 downcasts the correlation column, then writes row indices into
    # a copy of it (hta/common/trace.py, transform_correlation_to_index), which pandas 3 refuses
    # when the ids fit int8 and the rows do not. A real step's ids never fit int8.
    trace = transformer_trace(layers=12)
    assert len(trace.ops) >= 128
    hta = pytest.importorskip("hta.trace_analysis", reason="needs the holistictraceanalysis package")
    Profile(trace).export_chrome_trace(tmp_path / "rank0.json")
    json.loads((tmp_path / "rank0.json").read_text())
    analyzer = hta.TraceAnalysis(trace_dir=str(tmp_path))
    assert len(analyzer.get_temporal_breakdown(visualize=False))
    kernel_types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
    assert len(kernel_types)
    assert len(analyzer.get_idle_time_breakdown(visualize=False)[0])
    assert len(analyzer.get_comm_comp_overlap(visualize=False))
