"""Side-by-side views: devices (from ``compare``) and profiles (e.g. eager vs compiled)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import ENGINE_COLOURS, LEVEL_COLOURS, base_layout, dma_queues, empty_figure, time_scale

__all__ = ["comparison_figure", "profiles_figure"]

_MODE_COLOURS = {False: "#1f77b4", True: "#2ca02c"}


def _panels(titles):
    return make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.1)


def comparison_figure(frame: pd.DataFrame, *, title: str = "Device comparison", height: int = 430) -> go.Figure:
    """Time, HBM traffic and launches per (device, target, mode) row of ``Comparison.frame``.

    CPU rows have no simulated time: their bar is the measured host wall time, hatched.
    """
    if not len(frame):
        return empty_figure(title, "nothing was compared")
    scale, unit = time_scale(float(frame["time_s"].max()) * 1e9)
    fig = _panels((f"time ({unit})", "HBM traffic (bytes)", "ops / kernels launched"))
    spread = frame["time_s"][frame["time_s"] > 0]
    log_time = len(spread) > 1 and spread.max() / spread.min() > 50
    # One x position per device/target; eager and compiled bars stand side by side in it.
    config = (frame["device"].astype(str) + " " + frame["target"].fillna("").astype(str)).str.strip()
    for compiled, rows in frame.assign(config=config).groupby("compiled", sort=False):
        mode = "compiled" if compiled else "eager"
        measured = rows["time_kind"] != "simulated"
        colour = _MODE_COLOURS[bool(compiled)]
        fig.add_bar(row=1, col=1, x=rows["config"], y=rows["time_s"] * 1e9 / scale, name=mode, legendgroup=mode,
                    marker={"color": colour, "pattern": {"shape": ["x" if m else "" for m in measured]}},
                    customdata=rows["time_kind"],
                    hovertemplate=f"%{{x}}<br>%{{y:.4g}} {unit} (%{{customdata}})<extra>{mode}</extra>")
        fig.add_bar(row=1, col=2, x=rows["config"], y=rows["hbm_bytes"], name=mode, legendgroup=mode,
                    showlegend=False, marker_color=colour,
                    hovertemplate=f"%{{x}}<br>%{{y:.4s}}B<extra>{mode}</extra>")
        fig.add_bar(row=1, col=3, x=rows["config"], y=rows["launch_count"] if "launch_count" in rows else rows["op_count"], name=mode, legendgroup=mode,
                    showlegend=False, marker_color=colour,
                    hovertemplate=f"%{{x}}<br>%{{y}} ops<extra>{mode}</extra>")
    note = "hatched: measured host wall time (no simulator on cpu); others: simulated device time"
    base_layout(fig, f"{title}<br><sup>{note}</sup>", height=height, legend_title="mode", top=100)
    fig.update_layout(barmode="group")
    fig.update_yaxes(row=1, col=1, title_text=f"time ({unit})", type="log" if log_time else "linear",
                     dtick=1 if log_time else None)
    fig.update_yaxes(row=1, col=2, title_text="bytes", tickformat="~s", ticksuffix="B")
    fig.update_yaxes(row=1, col=3, title_text="count")
    fig.update_xaxes(title_text="device")
    return fig


def profiles_figure(profiles: dict, *, title: str = "Eager vs compiled", height: int = 430) -> go.Figure:
    """Engine busy time, HBM traffic and launches of named profiles, side by side."""
    if not profiles:
        return empty_figure(title, "no profiles to compare")
    labels = list(profiles)
    busy = [{e: ns / (dma_queues(p.trace) if e == "dma" else 1) for e, ns in p.trace.busy_ns_by_engine_class().items()}
            for p in profiles.values()]
    summaries = [p.summary for p in profiles.values()]
    scale, unit = time_scale(max((max(b.values(), default=0.0) for b in busy), default=0.0))
    fig = _panels((f"engine busy time ({unit})", "HBM traffic (bytes)", "ops / kernels launched"))
    engines = sorted({e for b in busy for e in b}, key=lambda e: list(ENGINE_COLOURS).index(e)
                     if e in ENGINE_COLOURS else len(ENGINE_COLOURS))
    for engine in engines:
        fig.add_bar(row=1, col=1, x=labels, y=[b.get(engine, 0.0) / scale for b in busy], name=engine,
                    legendgroup="engine", legendgrouptitle_text="engine",
                    marker_color=ENGINE_COLOURS.get(engine, "#7f7f7f"),
                    hovertemplate=f"%{{x}}<br>{engine} busy %{{y:.4g}} {unit}"
                    + (" (mean over DMA queues)" if engine == "dma" else "") + "<extra></extra>")
    for way, pattern in (("read", ""), ("write", "/")):
        fig.add_bar(row=1, col=2, x=labels, y=[s[f"hbm_{way}_bytes"] for s in summaries], name=f"HBM {way}",
                    legendgroup="hbm", legendgrouptitle_text="traffic",
                    marker={"color": LEVEL_COLOURS["hbm"], "pattern": {"shape": pattern}},
                    hovertemplate=f"%{{x}}<br>HBM {way} %{{y:.4s}}B<extra></extra>")
    fig.add_bar(row=1, col=3, x=labels, y=[s.get("launch_count", s["op_count"]) for s in summaries], name="launches",
                marker_color="#7f7f7f", showlegend=False, hovertemplate="%{x}<br>%{y} launches<extra></extra>")
    times = ", ".join(f"{k}: {s['total_time'] * 1e9 / scale:.4g} {unit}" for k, s in zip(labels, summaries))
    base_layout(fig, f"{title}<br><sup>simulated time {times}</sup>", height=height, top=100)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(row=1, col=1, title_text=f"busy time ({unit})")
    fig.update_yaxes(row=1, col=2, title_text="bytes", tickformat="~s", ticksuffix="B")
    fig.update_yaxes(row=1, col=3, title_text="count")
    return fig
