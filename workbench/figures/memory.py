"""Memory traffic by level: per-op bytes, cumulative bytes over time, HBM allocation over time."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import LEVEL_COLOURS, base_layout, empty_figure, time_scale
from workbench.profiles import Profile

__all__ = ["memory_figure", "TRAFFIC_COLUMNS"]

TRAFFIC_COLUMNS = tuple(f"{level}_{way}_bytes" for level in ("hbm", "sbuf", "psum") for way in ("read", "write"))


def _style(column: str) -> dict:
    level, way = column.split("_")[:2]
    return {"name": f"{level.upper()} {way}", "legendgroup": column,
            "color": LEVEL_COLOURS[level], "dash": "solid" if way == "read" else "dot",
            "pattern": "" if way == "read" else "/"}


def memory_figure(profile, *, top: int = 15, height: int = 820) -> go.Figure:
    """Three panels: bytes per op name (top by HBM traffic), cumulative bytes, HBM allocated."""
    profile = Profile.coerce(profile)
    title = f"Memory traffic by level: {profile.trace.device_kind} {profile.trace.target}"
    ops = profile.ops
    if not len(ops):
        return empty_figure(title, "no ops were recorded")
    columns = [c for c in TRAFFIC_COLUMNS if c in ops]
    per_name = ops.groupby("name", sort=False)[columns + ["hbm_bytes"]].sum()
    per_name = per_name.sort_values("hbm_bytes", ascending=False).head(top)
    timeline = profile.memory["hbm_timeline"]
    span = float(ops["end_ns"].max() - ops["start_ns"].min())
    scale, unit = time_scale(span)
    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.14, row_heights=[0.4, 0.3, 0.3],
                        subplot_titles=(f"bytes per op name (top {len(per_name)} by HBM traffic, all calls)",
                                        "cumulative bytes moved", "HBM allocated"))
    order = ops.sort_values("end_ns", kind="stable")
    end_time = order["end_ns"].to_numpy() / scale
    for column in columns:
        style = _style(column)
        fig.add_bar(row=1, col=1, x=per_name.index, y=per_name[column], name=style["name"],
                    legendgroup=style["legendgroup"],
                    marker={"color": style["color"], "pattern": {"shape": style["pattern"]}},
                    hovertemplate=f"%{{x}}<br>{style['name']} %{{y:.4s}}B<extra></extra>")
        cumulative = np.cumsum(order[column].to_numpy())
        fig.add_scatter(row=2, col=1, x=end_time, y=cumulative, name=style["name"], mode="lines",
                        legendgroup=style["legendgroup"], showlegend=False,
                        line={"color": style["color"], "dash": style["dash"], "shape": "hv"},
                        hovertemplate=f"%{{x:.4g}} {unit}<br>{style['name']} %{{y:.4s}}B<extra></extra>")
    if len(timeline):
        fig.add_scatter(row=3, col=1, x=timeline["time_ns"] / scale, y=timeline["allocated_bytes"],
                        name="HBM allocated", mode="lines", line={"color": LEVEL_COLOURS["hbm"], "shape": "hv"},
                        fill="tozeroy", hovertemplate=f"%{{x:.4g}} {unit}<br>allocated %{{y:.4s}}B<extra></extra>")
    else:
        fig.add_annotation(text="the device reported no allocation samples", showarrow=False,
                           x=0.5, y=0.5, xref="x3 domain", yref="y3 domain")
        fig.update_yaxes(row=3, col=1, showticklabels=False)
    base_layout(fig, title, height=height, legend_title="level")
    fig.update_layout(barmode="group", bargap=0.15)
    fig.update_xaxes(row=1, col=1, tickangle=-30, automargin=True)   # the subplot title names the axis
    fig.update_xaxes(row=2, col=1, title_text=f"time ({unit})")
    fig.update_xaxes(row=3, col=1, title_text=f"time ({unit})", matches="x2")
    for row, label in ((1, "bytes"), (2, "bytes (cumulative)"), (3, "bytes allocated")):
        fig.update_yaxes(row=row, col=1, title_text=label, tickformat="~s", ticksuffix="B", rangemode="tozero")
    return fig
