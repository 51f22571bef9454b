"""Eager vs compiled on the same simulated target, and the registry's view of the kernels.

The direction of every comparison comes out of the lowering and the simulator: the compiled
run feeds fused kernels (``lower_kernel``), the eager run feeds one program per op.
"""
import re

import pytest
import torch

import backend.compile
from backend import recording
from backend.lowering import EagerSession
from backend.sim.gpu.timeline import GpuSession
from benchmarks.compile_bench import Block

LAUNCH_KINDS = ("op", "kernel", "fallback")


def _step(model, x):
    model(x).pow(2).mean().backward()


def _profile(make_session, model, x):
    session = make_session()
    with recording.recording(session):
        _step(model, x)
    trace = session.trace
    return trace, trace.summary(), sum(1 for op in trace.ops if op.kind in LAUNCH_KINDS)


@pytest.fixture
def block_runs(neuron):
    torch.manual_seed(0)
    block = Block(d=128, heads=4, seq=64).to(neuron)
    compiled = torch.compile(block, backend="neuron")
    x = torch.randn(4, 64, 128, device=neuron)
    _step(compiled, x)       # compile outside the measured runs
    return block, compiled, x


def test_transformer_block_compiled_beats_eager_on_neuroncore(block_runs):
    block, compiled, x = block_runs
    eager, eager_sum, eager_launches = _profile(lambda: EagerSession("trn2"), block, x)
    comp, comp_sum, comp_launches = _profile(lambda: EagerSession("trn2"), compiled, x)
    kernels = [op for op in comp.ops if op.kind == "kernel"]
    eager_ops = [op for op in eager.ops if op.kind in LAUNCH_KINDS]
    assert kernels and len(kernels) < len(eager_ops)
    assert comp_launches < eager_launches
    hbm = lambda s: s["hbm_read_bytes"] + s["hbm_write_bytes"]   # noqa: E731
    assert hbm(comp_sum) < hbm(eager_sum)
    assert comp_sum["total_time_ns"] < eager_sum["total_time_ns"]
    assert comp_sum["tensor_engine_active_time_percent"] > eager_sum["tensor_engine_active_time_percent"]
    # same model FLOPs either way: fusion moves data, it does not change the math
    assert comp_sum["total_flops"] == pytest.approx(eager_sum["total_flops"], rel=0.05)
    # kernels carry their FX nodes and the user's source line
    attention = next(op for op in kernels if "attention" in op.name)
    assert "bmm" in attention.nodes and re.search(r"compile_bench\.py:\d+$", attention.source)


def test_transformer_block_compiled_beats_eager_on_gpu_model(block_runs):
    block, compiled, x = block_runs
    _, eager_sum, eager_launches = _profile(GpuSession, block, x)
    comp, comp_sum, comp_launches = _profile(GpuSession, compiled, x)
    assert comp.device_kind == "cuda" and any(op.kind == "kernel" for op in comp.ops)
    assert comp_launches < eager_launches
    # this small block's kernels fit L2: compare the traffic of both levels
    traffic = lambda s: sum(s[f"{level}_{way}_bytes"] for level in ("hbm", "l2") for way in ("read", "write"))  # noqa: E731
    assert traffic(comp_sum) < traffic(eager_sum)
    assert comp_sum["total_time_ns"] < eager_sum["total_time_ns"]


def test_registry_describes_graph_for_the_figure(block_runs):
    from workbench.graphs import CompiledGraph

    (graph,) = backend.compile.compiled_graphs()
    assert set(graph.parts) == {"forward", "backward"}
    costs = {c.name: c for c in graph.forward.costs.values()}
    assert set(costs) == set(graph.forward.fusion_groups)
    assert all(c.time_ns > 0 and c.hbm_bytes > 0 for c in costs.values())
    assert graph.forward.target == "trn2"
    for part in ("forward", "backward"):
        desc = graph.graph_dict(part)
        figure = CompiledGraph.from_dict(desc)
        names = {n.name for n in figure.nodes}
        assert all(a in names and b in names for a, b in figure.edges)
        assert figure.groups == graph.parts[part].fusion_groups
        assert "def forward" in figure.fx_text
    fw = graph.graph_dict("forward")
    grouped = [n for n in fw["nodes"] if n["group"]]
    assert all(n["cost_ns"] == costs[n["group"]].time_ns for n in grouped)
    assert any(n["source"] and "compile_bench.py" in n["source"] for n in grouped)
    record = graph.to_record()
    assert record["forward_kernels"] < record["forward_ops"]
