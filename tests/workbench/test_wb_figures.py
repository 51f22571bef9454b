"""Each figure draws the data it claims, with labelled axes and units."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.figures import (comparison_figure, graph_figure, highlight_op, memory_figure, profiles_figure,
                               roofline_figure, timeline_figure, utilisation_figure)
from workbench.figures.roofline import roofline_points
from workbench.graphs import CompiledGraph, layered_layout
from workbench.profiles import Profile
from wb_graph import attention_graph
from wb_synth import transformer_trace


def _bars(fig, lane=None):
    return [t for t in fig.data if t.type == "bar" and (lane is None or (lane in set(t.y)))]


def test_timeline_has_a_track_per_engine_and_every_instruction(small_trace):
    prof = Profile(small_trace)
    fig = timeline_figure(prof)
    assert list(fig.layout.yaxis.categoryarray) == ["ops"] + list(prof.timeline)
    engine_bars = [t for t in fig.data if t.legendgroup != "ops"]
    assert sum(len(t.x) for t in engine_bars) == len(small_trace.events)
    scale = fig.layout.meta["time_scale_ns"]
    drawn = sum(float(np.sum(t.x)) for t in engine_bars) * scale
    assert drawn == pytest.approx(sum(e.duration_ns for e in small_trace.events))
    ops_lane = [t for t in fig.data if t.legendgroup == "ops"]
    assert sum(len(t.x) for t in ops_lane) == len(small_trace.ops)
    assert {t.name for t in ops_lane} == {"op", "view", "kernel", "fallback"}
    assert fig.layout.xaxis.title.text == "time (µs)"
    assert "%{customdata[1]}" in engine_bars[0].hovertemplate


def test_timeline_merges_into_bins_beyond_the_bar_limit(small_trace):
    fig = timeline_figure(small_trace, max_bars=40)
    engine_bars = [t for t in fig.data if t.legendgroup != "ops"]
    assert sum(len(t.x) for t in engine_bars) <= 40
    assert sum(int(np.sum(np.asarray(t.customdata)[:, 2])) for t in engine_bars) == len(small_trace.events)
    assert "drawn as" in fig.layout.title.text


def test_highlight_op_shades_its_span_and_clears(small_trace):
    prof = Profile(small_trace)
    fig = timeline_figure(prof)
    op = small_trace.ops[5]
    highlight_op(fig, prof, 5)
    (shape,) = fig.layout.shapes
    scale = fig.layout.meta["time_scale_ns"]
    assert (shape.x0 * scale, shape.x1 * scale) == pytest.approx((op.start_ns, op.end_ns))
    highlight_op(fig, prof, None)
    assert fig.layout.shapes == ()
    with pytest.raises(KeyError):
        highlight_op(fig, prof, 10_000)


def test_utilisation_stacks_busy_time_per_engine_class(small_trace):
    fig = utilisation_figure(small_trace, group_by="op", sort="time", top=100)
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert fig.layout.barmode == "stack"
    scale = 1e3          # short ops: µs
    assert "µs" in fig.layout.xaxis.title.text
    total_tensor = sum(op.busy_ns.get("tensor", 0.0) for op in small_trace.ops)
    assert float(np.sum(bars["tensor"].x)) * scale == pytest.approx(total_tensor)
    wall = next(t for t in fig.data if t.name == "wall time")
    assert list(wall.x) == sorted(wall.x, reverse=True)   # sorted by time, longest first


def test_utilisation_groups_by_name_and_sorts_by_order(small_trace):
    fig = utilisation_figure(small_trace, group_by="name", sort="order")
    labels = list(fig.data[0].y)
    assert labels[0].startswith("aten::native_layer_norm ×")
    assert any(label.startswith("aten::addmm ×") for label in labels)
    with pytest.raises(ValueError):
        utilisation_figure(small_trace, sort="colour")


def test_memory_figure_has_levels_cumulative_and_allocation(small_trace):
    fig = memory_figure(small_trace)
    bars = [t for t in fig.data if t.type == "bar"]
    assert {t.name for t in bars} == {"HBM read", "HBM write", "SBUF read", "SBUF write", "PSUM read", "PSUM write"}
    hbm_read = next(t for t in fig.data if t.type == "scatter" and t.legendgroup == "hbm_read_bytes")
    assert hbm_read.y[-1] == sum(op.hbm_read_bytes for op in small_trace.ops)
    alloc = next(t for t in fig.data if t.name == "HBM allocated")
    assert max(alloc.y) == max(b for _, b in small_trace.hbm_timeline)
    assert fig.layout.yaxis.ticksuffix == "B" and "time" in fig.layout.xaxis2.title.text


def test_roofline_places_ops_under_the_target_ceilings(small_trace):
    prof = Profile(small_trace)
    fig = roofline_figure(prof)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    roof = next(t for t in fig.data if t.name == "roof")
    assert max(roof.y) == pytest.approx(small_trace.peak_flops_per_s)
    assert roof.y[0] == pytest.approx(small_trace.hbm_bytes_per_s * roof.x[0])
    pts = roofline_points(prof)
    placed = sum(len(t.x) for t in fig.data if t.mode == "markers")
    assert placed == len(pts) and placed > 0
    assert (pts["roof_percent"] > 0).all()
    assert "FLOP / HBM byte" in fig.layout.xaxis.title.text


def test_layered_layout_sends_every_edge_rightwards():
    graph = attention_graph()
    pos = layered_layout(graph)
    assert all(pos[a][0] < pos[b][0] for a, b in graph.edges)
    assert pos["w_o"][0] == pos["proj"][0] - 1        # inputs sit just before their consumer
    assert len(set(pos.values())) == len(pos)


def test_graph_figure_colours_nodes_by_fusion_group():
    graph = attention_graph()
    fig = graph_figure(graph)
    groups = {t.name.split(" (")[0]: t for t in fig.data if t.mode and "markers" in t.mode}
    assert set(groups) == {"k0_norm", "k1_mm", "k2_attn", "k3_mm", "(not fused)"}
    assert len(groups["k2_attn"].x) == 4
    assert len({t.marker.color for t in groups.values()}) == len(groups)
    assert any("model.py:23" in h and "9.1 us" in h for h in groups["k2_attn"].hovertext)
    edges = fig.data[0]
    assert len(edges.x) == 3 * len(graph.edges)
    assert "1 graph breaks" in fig.layout.title.text


def test_graph_coerces_dicts_and_fx_like_objects():
    class Node:
        def __init__(self, name, op, inputs):
            self.name, self.op, self.target, self.all_input_nodes = name, op, name, inputs
            self.meta = {"stack_trace": f'  File "m.py", line 7, in forward\n    y = {name}(x)'}

    a = Node("x", "placeholder", [])
    b = Node("relu", "call_function", [a])

    class Holder:
        name = "g"
        graph = type("G", (), {"nodes": [a, b], "__str__": lambda self: "graph()"})()
        node_groups = {"relu": "k0"}

    g = CompiledGraph.coerce(Holder())
    assert [n.name for n in g.nodes] == ["x", "relu"] and g.edges == [("x", "relu")]
    assert g.nodes[1].group == "k0" and g.nodes[1].source == "m.py:7"
    assert CompiledGraph.coerce(g.to_dict()).to_dict() == g.to_dict()
    with pytest.raises(TypeError):
        CompiledGraph.coerce(object())


def test_comparison_figure_marks_cpu_as_measured():
    frame = pd.DataFrame([
        {"label": "cpu", "device": "cpu", "target": "", "compiled": False, "time_s": 2e-3,
         "time_kind": "measured host wall time", "hbm_bytes": 0, "op_count": 0},
        {"label": "neuron trn2", "device": "neuron", "target": "trn2", "compiled": False, "time_s": 3e-5,
         "time_kind": "simulated", "hbm_bytes": 4e6, "op_count": 12},
        {"label": "neuron trn2 compiled", "device": "neuron", "target": "trn2", "compiled": True,
         "time_s": 1e-5, "time_kind": "simulated", "hbm_bytes": 1e6, "op_count": 3}])
    fig = comparison_figure(frame)
    eager = next(t for t in fig.data if t.name == "eager" and t.xaxis == "x")
    assert list(eager.marker.pattern.shape) == ["x", ""]
    assert fig.layout.yaxis.type == "log"          # 200x spread
    assert "measured host wall time" in fig.layout.title.text


def test_profiles_figure_compares_engine_time_and_traffic():
    eager, compiled = Profile(transformer_trace(2)), Profile(transformer_trace(1))
    fig = profiles_figure({"eager": eager, "compiled": compiled})
    tensor = next(t for t in fig.data if t.name == "tensor")
    assert list(tensor.x) == ["eager", "compiled"] and tensor.y[0] == pytest.approx(2 * tensor.y[1])
    launches = next(t for t in fig.data if t.name == "launches")
    assert list(launches.y) == [eager.summary["launch_count"], compiled.summary["launch_count"]]


def test_empty_profile_figures_say_why():
    prof = Profile()
    for fig in prof.figures().values():
        assert fig.layout.annotations and "no " in fig.layout.annotations[0].text
