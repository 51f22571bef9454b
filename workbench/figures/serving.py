"""Serving figures: latency CDFs of one or more runs, and KV cache occupancy over time."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import base_layout, empty_figure, palette

__all__ = ["latency_cdf_figure", "kv_occupancy_figure"]

_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end to end"))


def latency_cdf_figure(results, *, title: str = "Latency CDF", height: int = 380) -> go.Figure:
    """One panel per metric (TTFT, TPOT, end to end), one line per run; ``results`` is a
    ServingResult, or a dict label -> ServingResult to overlay several (targets, loads)."""
    runs = results if isinstance(results, dict) else {results.label: results}
    fig = make_subplots(rows=1, cols=len(_METRICS), subplot_titles=[f"{name} (s)" for _, name in _METRICS])
    for i, (label, result) in enumerate(runs.items()):
        frame = result.requests
        for col, (column, _) in enumerate(_METRICS, start=1):
            values = np.sort(frame[column].dropna().to_numpy())
            if not values.size:
                continue
            fig.add_scatter(row=1, col=col, x=values, y=np.arange(1, values.size + 1) / values.size, mode="lines",
                            name=str(label), legendgroup=str(label), showlegend=col == 1,
                            line={"color": palette(i), "shape": "hv"})
    base_layout(fig, title, height=height)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    return fig


def kv_occupancy_figure(result, *, title: str = "KV cache occupancy", height: int = 360) -> go.Figure:
    """KV blocks in use (share of the cache) and the waiting queue, per replica, over time."""
    timeline = result.timeline
    if not len(timeline):
        return empty_figure(title, "no iterations ran")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("KV blocks in use (%)", "requests waiting"))
    for replica, rows in timeline.groupby("replica"):
        colour = palette(int(replica))
        fig.add_scatter(row=1, col=1, x=rows["start_s"], y=100 * rows["kv_blocks_used"] / rows["kv_blocks_total"],
                        mode="lines", line={"color": colour, "shape": "hv"}, name=f"replica {replica}")
        fig.add_scatter(row=2, col=1, x=rows["start_s"], y=rows["waiting"], mode="lines", showlegend=False,
                        line={"color": colour, "shape": "hv"})
    base_layout(fig, title, height=height)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    return fig
