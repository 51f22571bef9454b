"""Holistic Trace Analysis (HTA) on the traces ranks write: the workbench's own export and
torch.profiler's, from a real two-rank torchrun job and from one rank of a fake world. Every rank
loads, collectives count as communication, and the breakdowns have numbers (not NaN)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import workbench as wb
from workbench.distributed import fake_world

hta = pytest.importorskip("hta.trace_analysis", reason="needs the holistictraceanalysis package")

SCRIPT = Path(__file__).with_name("hta_rank_script.py")


def _analyses(trace_dir) -> dict:
    analyzer = hta.TraceAnalysis(trace_dir=str(trace_dir))
    kernel_types, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
    return {"ranks": sorted(analyzer.t.traces),
            "temporal": analyzer.get_temporal_breakdown(visualize=False),
            "overlap": analyzer.get_comm_comp_overlap(visualize=False),
            "idle": analyzer.get_idle_time_breakdown(visualize=False)[0],
            "kernel_types": dict(zip(kernel_types["kernel_type"], kernel_types["sum"]))}


def _check(result: dict, ranks: list) -> None:
    assert result["ranks"] == ranks
    temporal = result["temporal"]
    assert list(temporal["rank"]) == ranks
    assert (temporal["idle_time(us)"] + temporal["compute_time(us)"] + temporal["non_compute_time(us)"]
            == temporal["kernel_time(us)"]).all()
    overlap = result["overlap"]["comp_comm_overlap_pctg"]
    assert len(overlap) == len(ranks) and not any(math.isnan(v) for v in overlap)
    assert len(result["idle"])
    communication = result["kernel_types"].get("COMMUNICATION", 0) + result["kernel_types"].get(
        "COMPUTATION overlapping COMMUNICATION", 0)
    assert communication > 0 and result["kernel_types"]["COMPUTATION"] > 0


@pytest.fixture
def one_rank_of_eight():
    fake_world(8, topology="trn2.48xlarge")
    yield
    dist.destroy_process_group()


def _step_with_an_overlapped_all_reduce(device):
    grads = torch.ones(2**20, device=device)
    a = torch.randn(256, 256, device=device)
    work = dist.all_reduce(grads, async_op=True)      # runs beside the matmuls on its own lane
    for _ in range(4):
        a = torch.tanh(a @ a)
    work.wait()
    return a


def test_hta_reads_a_fake_world_ranks_workbench_trace(one_rank_of_eight, neuron, tmp_path):
    with wb.profile() as prof:
        _step_with_an_overlapped_all_reduce(neuron)
    prof.export_chrome_trace(tmp_path / "rank0.json")
    result = _analyses(tmp_path)
    _check(result, [0])
    assert result["overlap"]["comp_comm_overlap_pctg"][0] > 0


def test_hta_reads_a_fake_world_ranks_torch_profiler_trace(one_rank_of_eight, neuron, tmp_path):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _step_with_an_overlapped_all_reduce(neuron)
    prof.export_chrome_trace(str(tmp_path / "rank0.json"))
    result = _analyses(tmp_path)
    _check(result, [0])
    assert result["overlap"]["comp_comm_overlap_pctg"][0] > 0


@pytest.fixture(scope="module")
def torchrun_traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(SCRIPT), str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wb", "torch"])
def test_hta_reads_both_ranks_of_a_torchrun_job(torchrun_traces, kind):
    _check(_analyses(torchrun_traces / kind), [0, 1])


@pytest.mark.slow
def test_hta_finds_stragglers_among_the_steps_of_the_workbench_traces(torchrun_traces):
    analyzer = hta.TraceAnalysis(trace_dir=str(torchrun_traces / "wb"))
    # Four marked steps; HTA leaves out the last, and its straggler metric reads steps after the first.
    assert analyzer.t.get_iterations(0) == analyzer.t.get_iterations(1) == [0, 1, 2]
    stragglers = analyzer.get_potential_stragglers(num_candidates=1)
    assert len(stragglers) == 1 and stragglers[0] in (0, 1)
