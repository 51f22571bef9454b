"""A small compiled attention graph, as the compile layer would describe it."""
from __future__ import annotations

from workbench.graphs import CompiledGraph, GraphNode

__all__ = ["attention_graph"]


def attention_graph() -> CompiledGraph:
    nodes = [GraphNode("x", "placeholder"), GraphNode("w_qkv", "placeholder"), GraphNode("w_o", "placeholder")]
    edges = []

    def add(name, target, group, cost, src, *inputs):
        nodes.append(GraphNode(name, "call_function", target, group, cost, src))
        edges.extend((i, name) for i in inputs)

    add("layer_norm", "aten.native_layer_norm.default", "k0_norm", 3200.0, "model.py:12", "x")
    add("qkv", "aten.mm.default", "k1_mm", 15400.0, "model.py:20", "layer_norm", "w_qkv")
    add("q", "aten.slice.Tensor", "k1_mm", 15400.0, "model.py:21", "qkv")
    add("k", "aten.slice.Tensor", "k1_mm", 15400.0, "model.py:21", "qkv")
    add("v", "aten.slice.Tensor", "k1_mm", 15400.0, "model.py:21", "qkv")
    add("scores", "aten.bmm.default", "k2_attn", 9100.0, "model.py:22", "q", "k")
    add("amax", "aten.amax.default", "k2_attn", 9100.0, "model.py:23", "scores")
    add("sub", "aten.sub.Tensor", "k2_attn", 9100.0, "model.py:23", "scores", "amax")
    add("exp", "aten.exp.default", "k2_attn", 9100.0, "model.py:23", "sub")
    add("ctx", "aten.bmm.default", "k3_mm", 6400.0, "model.py:24", "exp", "v")
    add("proj", "aten.mm.default", "k3_mm", 6400.0, "model.py:25", "ctx", "w_o")
    add("residual", "aten.add.Tensor", None, 0.0, "model.py:26", "proj", "x")
    nodes.append(GraphNode("output", "output"))
    edges.append(("residual", "output"))
    return CompiledGraph("forward_0", nodes, edges, fx_text="graph():\n    %x : placeholder[target=x]",
                         kernel_cost_ns={"k0_norm": 3200.0, "k1_mm": 15400.0, "k2_attn": 9100.0, "k3_mm": 6400.0},
                         graph_breaks=["print() at model.py:30"])
