"""Compiled graph view: the FX graph as a layered DAG, nodes coloured by fusion group."""
from __future__ import annotations

import plotly.graph_objects as go

from workbench.figures.style import base_layout, empty_figure, palette
from workbench.format import fmt_time_s
from workbench.graphs import CompiledGraph, layered_layout

__all__ = ["graph_figure"]

_UNFUSED = "(not fused)"
_MAX_LABELS = 80        # beyond this many nodes, names only on hover


def graph_figure(graph, *, height: int | None = None) -> go.Figure:
    """Layered DAG of ``graph`` (a CompiledGraph, dict or object the compile layer hands over)."""
    graph = CompiledGraph.coerce(graph)
    title = f"Compiled graph {graph.name}"
    if not graph.nodes:
        return empty_figure(title, "the graph has no nodes")
    pos = layered_layout(graph)
    width_of = {}
    for layer, slot in pos.values():
        width_of[layer] = max(width_of.get(layer, 0), slot + 1)
    # Centre each layer vertically so wide layers do not all hang from the top.
    xy = {name: (layer, slot - (width_of[layer] - 1) / 2) for name, (layer, slot) in pos.items()}
    edge_x, edge_y = [], []
    for src, dst in graph.edges:
        if src in xy and dst in xy:
            edge_x += [xy[src][0], xy[dst][0], None]
            edge_y += [xy[src][1], xy[dst][1], None]
    fig = go.Figure(go.Scatter(x=edge_x, y=edge_y, mode="lines", name="dataflow", hoverinfo="skip",
                               line={"color": "#b8b8b8", "width": 1}, showlegend=False))
    groups: dict = {}
    for node in graph.nodes:
        groups.setdefault(node.group if node.group is not None else _UNFUSED, []).append(node)
    show_text = len(graph.nodes) <= _MAX_LABELS
    for i, (group, nodes) in enumerate(groups.items()):
        colour = "#d0d0d0" if group == _UNFUSED else palette(i)
        cost = graph.kernel_cost_ns.get(group) or max((n.cost_ns for n in nodes), default=0.0)
        hover = [f"<b>{n.name}</b> ({n.op})<br>{n.target}<br>group: {group}<br>"
                 f"kernel cost: {fmt_time_s(n.cost_ns * 1e-9) if n.cost_ns else 'n/a'}<br>"
                 f"source: {n.source or 'unknown'}" for n in nodes]
        label = f"{group} ({fmt_time_s(cost * 1e-9)})" if cost else group
        fig.add_scatter(x=[xy[n.name][0] for n in nodes], y=[xy[n.name][1] for n in nodes],
                        mode="markers+text" if show_text else "markers", name=label,
                        text=[n.name for n in nodes] if show_text else None, textposition=["top center" if xy[n.name][0] % 2 else "bottom center" for n in nodes],
                        textfont={"size": 10}, hovertext=hover, hoverinfo="text",
                        marker={"size": 14, "color": colour, "line": {"width": 1, "color": "#444"},
                                "symbol": "square" if any(n.op in ("placeholder", "output") for n in nodes)
                                and group == _UNFUSED else "circle"})
    breaks = f", {len(graph.graph_breaks)} graph breaks" if graph.graph_breaks else ""
    sub = f"{len(graph.nodes)} nodes, {len(graph.groups)} fusion groups{breaks}"
    depth = max(width_of)
    base_layout(fig, f"{title}<br><sup>{sub}</sup>",
                height=height or min(900, max(360, 140 + 46 * max(width_of.values()))),
                legend_title="fusion group (kernel cost)")
    fig.update_xaxes(title_text="dataflow depth (layers from inputs)", showgrid=False, zeroline=False,
                     dtick=1 if depth <= 30 else None)
    fig.update_yaxes(title_text="nodes in layer", showticklabels=False, showgrid=False, zeroline=False)
    return fig
