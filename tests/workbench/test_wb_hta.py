"""Chrome traces load into Holistic Trace Analysis (HTA): one kernel per op on the device's
streams, linked to its op by correlation id, on the microsecond grid HTA works on, and
``distributedInfo`` where HTA's rank pattern finds it.

HTA's parser (hta/common/trace_file.py, trace_parser.py, trace.py) finds the rank with
``"rank":\\s+(\\d+)``, drops events without ``cat`` or ``dur``, rounds float times (start up, end
down) and downcasts the correlation column before storing row numbers in it; the tests check the
file against each, and run HTA's analyses on it.
"""
from __future__ import annotations

import json
import re

import pytest

from backend.sim.trace import OpSummary, Trace
from wb_synth import transformer_trace
from workbench.export import CORRELATION_BASE, KERNELS_PID, chrome_trace_dict, export_chrome_trace
from workbench.profiles import Profile


@pytest.fixture
def trace_dict(small_trace):
    return chrome_trace_dict(Profile(small_trace))


def _tiny_trace_with_a_collective() -> Trace:
    """Sub-microsecond ops, a view, a collective beside compute and the wait for it."""
    trace = Trace(target="trn2")
    rows = [("aten::mul", "op", 0.0, 400.0), ("aten::view", "view", 400.0, 400.0),
            ("aten::add", "op", 1_300.0, 1_700.0), ("collective::all_reduce", "op", 1_700.0, 9_100.0),
            ("aten::mm", "op", 1_800.0, 6_250.0), ("collective::wait", "wait", 6_250.0, 9_100.0),
            ("aten::relu", "op", 9_100.0, 9_350.0)]
    for i, (name, kind, start, end) in enumerate(rows):
        trace.add_op(OpSummary(op_index=i, name=name, kind=kind, start_ns=start, end_ns=end))
    return trace


def test_distributed_info_is_written_where_htas_rank_pattern_finds_it(small_trace, tmp_path):
    text = export_chrome_trace(Profile(small_trace), tmp_path / "rank0.json").read_text()
    assert re.search(r'"rank":\s+(\d+)', text).group(1) == "0"
    info = json.loads(text)["distributedInfo"]
    assert isinstance(info["rank"], int) and info["world_size"] >= 1 and isinstance(info["backend"], str)
    assert len(text) < 1.02 * len(json.dumps(json.loads(text), separators=(",", ":")))   # still compact


def test_each_op_of_device_work_is_one_kernel_linked_to_its_op(trace_dict, small_trace):
    events = trace_dict["traceEvents"]
    kernels = [e for e in events if e.get("pid") == KERNELS_PID and e.get("ph") == "X"]
    assert kernels and all(e["cat"] == "kernel" and e["tid"] == e["args"]["stream"] == 1 for e in kernels)
    work = [op for op in small_trace.ops if op.kind not in ("view", "wait")]
    assert sorted(e["args"]["op_index"] for e in kernels) == [op.op_index for op in work]
    # HTA pairs a kernel with the host-side event of the same correlation (stream -1: no stream).
    ops = {e["args"]["correlation"]: e for e in events if e.get("pid") == 2 and e.get("ph") == "X"}
    assert all("stream" not in e["args"] for e in ops.values())
    for kernel in kernels:
        assert kernel["args"]["correlation"] == CORRELATION_BASE + kernel["args"]["op_index"]
        assert ops[kernel["args"]["correlation"]]["name"] == kernel["args"]["op"]
    # Instruction events carry no category: HTA passes over them.
    assert not [e for e in events if e.get("pid") == 1 and e.get("ph") == "X" and "cat" in e]


def test_kernel_times_are_whole_microseconds_within_half_of_the_simulated_ones():
    trace = _tiny_trace_with_a_collective()
    events = chrome_trace_dict(Profile(trace))["traceEvents"]
    kernels = {e["args"]["op"]: e for e in events if e.get("pid") == KERNELS_PID and e.get("ph") == "X"}
    assert set(kernels) == {"aten::mul", "aten::add", "collective::all_reduce", "aten::mm", "aten::relu"}
    for op in trace.ops:
        kernel = kernels.get(op.name)
        if kernel is None:
            continue
        assert isinstance(kernel["ts"], int) and isinstance(kernel["dur"], int) and kernel["dur"] >= 0
        assert abs(kernel["ts"] - op.start_ns / 1000) <= 0.5
        assert abs(kernel["ts"] + kernel["dur"] - op.end_ns / 1000) <= 0.5
        assert kernel["args"]["duration_ns"] == op.end_ns - op.start_ns
    assert kernels["collective::all_reduce"]["tid"] == 2
    assert kernels["collective::all_reduce"]["name"].startswith("ncclKernel_AllReduce")
    assert kernels["aten::mm"]["name"] == "neuron::mm"


@pytest.fixture
def hta():
    return pytest.importorskip("hta.trace_analysis", reason="needs the holistictraceanalysis package")


def test_hta_analyses_a_run_with_sub_microsecond_kernels_and_a_collective(hta, tmp_path):
    Profile(_tiny_trace_with_a_collective()).export_chrome_trace(tmp_path / "rank0.json")
    analyzer = hta.TraceAnalysis(trace_dir=str(tmp_path))
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    # Kernels from 0 to 9.35 us on the grid: busy 0-0 (rounded away), 1-2, 2-9 (mm inside the
    # all-reduce), 9-9; idle 0-1: 1 us of 9.
    assert temporal.loc[0, "idle_time(us)"] == 1 and temporal.loc[0, "kernel_time(us)"] == 9
    overlap = analyzer.get_comm_comp_overlap(visualize=False)
    # mm (2-6 us) runs during the all-reduce (2-9 us): 4 of its 7 us.
    assert overlap.loc[0, "comp_comm_overlap_pctg"] == pytest.approx(100 * 4 / 7, abs=0.01)
    kernel_types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
    shares = dict(zip(kernel_types["kernel_type"], kernel_types["sum"]))
    assert shares["COMMUNICATION"] == 3 and shares["COMPUTATION overlapping COMMUNICATION"] == 4


def test_hta_analyses_run_on_the_exported_trace(hta, tmp_path):
    trace = transformer_trace(layers=12)
    Profile(trace).export_chrome_trace(tmp_path / "rank0.json")
    analyzer = hta.TraceAnalysis(trace_dir=str(tmp_path))
    assert len(analyzer.get_temporal_breakdown(visualize=False))
    kernel_types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
    assert len(kernel_types)
    assert len(analyzer.get_idle_time_breakdown(visualize=False)[0])
    assert len(analyzer.get_comm_comp_overlap(visualize=False))


def test_steps_marked_in_a_profile_are_the_profiler_steps_hta_reads(hta, tmp_path):
    import torch
    import workbench as wb

    a = torch.randn(128, 128, device="neuron")
    with wb.profile() as prof:
        for _ in range(3):
            a = torch.tanh(a @ a)
            prof.step()
    with pytest.raises(RuntimeError, match="inside its 'with wb.profile"):
        prof.step()
    ends = prof.meta["step_ends_ns"]
    assert len(ends) == 3 and ends == sorted(ends) and ends[-1] == prof.trace.ops[-1].end_ns
    prof.export_chrome_trace(tmp_path / "rank0.json")
    steps = [e for e in json.loads((tmp_path / "rank0.json").read_text())["traceEvents"]
             if e.get("name", "").startswith("ProfilerStep#")]
    assert [(e["name"], e["cat"]) for e in steps] == [(f"ProfilerStep#{n}", "user_annotation") for n in range(3)]
    assert [e["ts"] + e["dur"] for e in steps] == [round(ns / 1000) for ns in ends]
    analyzer = hta.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
    frame, symbols = analyzer.t.get_trace(0), analyzer.t.symbol_table.get_sym_table()
    kernels = frame[frame["stream"].gt(0)]
    # Each step's matmul and tanh kernels carry that step's iteration.
    assert [(symbols[name], it) for name, it in zip(kernels["name"], kernels["iteration"])] == [
        (kernel, n) for n in range(3) for kernel in ("neuron::mm", "neuron::tanh")]
