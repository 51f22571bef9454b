"""Roofline: each op/kernel at its arithmetic intensity and achieved FLOP/s, under the target's
compute ceiling and HBM bandwidth slope (log-log)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from workbench.figures.style import KIND_COLOURS, base_layout, empty_figure, time_scale
from workbench.profiles import Profile

__all__ = ["roofline_figure", "roofline_points"]


def roofline_points(profile):
    """Ops that did arithmetic and touched HBM, with intensity, achieved FLOP/s and % of the roof."""
    ops = profile.ops
    if not len(ops):
        return ops
    pts = ops[(ops["flops"] > 0) & (ops["hbm_bytes"] > 0) & (ops["time_ns"] > 0)].copy()
    pts["intensity"] = pts["flops"] / pts["hbm_bytes"]
    pts["achieved_flops_per_s"] = pts["flops"] / (pts["time_ns"] * 1e-9)
    peak, bw = profile.trace.peak_flops_per_s, profile.trace.hbm_bytes_per_s
    if peak and bw:
        roof = np.minimum(peak, bw * pts["intensity"])
        pts["roof_percent"] = 100.0 * pts["achieved_flops_per_s"] / roof
    else:
        pts["roof_percent"] = np.nan
    return pts


def roofline_figure(profile, *, height: int = 480) -> go.Figure:
    profile = Profile.coerce(profile)
    trace = profile.trace
    title = f"Roofline: {trace.device_kind} {trace.target}"
    pts = roofline_points(profile)
    if not len(pts):
        return empty_figure(title, "no op did FLOPs while moving HBM bytes")
    peak, bw = trace.peak_flops_per_s, trace.hbm_bytes_per_s
    scale, unit = time_scale(float(pts["time_ns"].max()))
    lo, hi = pts["intensity"].min() / 3, pts["intensity"].max() * 3
    fig = go.Figure()
    if peak and bw:
        ridge = peak / bw
        lo, hi = min(lo, ridge / 3), max(hi, ridge * 3)
        x = np.geomspace(lo, hi, 200)
        fig.add_scatter(x=x, y=np.minimum(peak, bw * x), mode="lines", name="roof",
                        line={"color": "black", "width": 2},
                        hovertemplate="intensity %{x:.3g} FLOP/B<br>ceiling %{y:.3s}FLOP/s<extra></extra>")
        fig.add_annotation(x=np.log10(hi), y=np.log10(peak), text=f"compute {peak / 1e12:.3g} TFLOP/s",
                           xanchor="right", yanchor="bottom", showarrow=False)
        mid = np.sqrt(lo * ridge)     # halfway up the slope, clear of the axis corner
        fig.add_annotation(x=np.log10(mid), y=np.log10(bw * mid),
                           text=f"HBM {bw / 1e9:.4g} GB/s", textangle=-30, xanchor="left",
                           yanchor="bottom", showarrow=False)
    for kind, rows in pts.groupby("kind", sort=False):
        custom = np.column_stack([[f"#{i} {n}" for i, n in zip(rows["op_index"], rows["name"])],
                                  rows["time_ns"] / scale, rows["roof_percent"].fillna(-1.0),
                                  rows["input_shapes"].astype(str) if "input_shapes" in rows else [""] * len(rows)])
        fig.add_scatter(x=rows["intensity"], y=rows["achieved_flops_per_s"], mode="markers", name=kind,
                        marker={"color": KIND_COLOURS.get(kind, "#7f7f7f"), "size": 8, "opacity": 0.75,
                                "line": {"width": 0.5, "color": "white"}},
                        customdata=custom,
                        hovertemplate=("<b>%{customdata[0]}</b><br>%{customdata[3]}<br>"
                                       "intensity %{x:.3g} FLOP/B<br>achieved %{y:.3s}FLOP/s "
                                       "(%{customdata[2]:.1f} % of roof)<br>"
                                       f"time %{{customdata[1]:.4g}} {unit}<extra></extra>"))
    skipped = len(profile.ops) - len(pts)
    sub = f"{len(pts)} ops with FLOPs and HBM traffic" + (f"; {skipped} others not placed" if skipped else "")
    base_layout(fig, f"{title}<br><sup>{sub}</sup>", height=height, legend_title="kind")
    fig.update_xaxes(type="log", dtick=1, title_text="arithmetic intensity (FLOP / HBM byte)")
    fig.update_yaxes(type="log", dtick=1, title_text="achieved FLOP/s", tickformat="~s")
    return fig
