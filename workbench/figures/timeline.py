"""Engine timeline: one track per engine and DMA queue, plus an ops lane on top.

Bars are drawn as horizontal plotly bars with a ``base`` (start) and a length (duration), so the
figure zooms and hovers like any plotly chart. Beyond ``max_bars`` events are merged per track
(see ``workbench.aggregate``); exports keep full detail.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from backend.sim.trace import engine_class
from workbench.aggregate import MIXED, aggregate_events
from workbench.figures.style import KIND_COLOURS, base_layout, empty_figure, engine_colour, shade, time_scale
from workbench.profiles import Profile

__all__ = ["timeline_figure", "highlight_op", "OPS_TRACK"]

OPS_TRACK = "ops"
_MAX_OPCODE_COLOURS = 12
_HOVER = ("<b>%{customdata[0]}</b><br>%{y} · %{customdata[1]}<br>"
          "start %{base:.4g} {unit}, duration %{x:.4g} {unit}<br>"
          "instructions %{customdata[2]:,} · busy %{customdata[3]:.4g} {unit}<br>"
          "bytes %{customdata[4]:.4s}B · FLOPs %{customdata[5]:.4s}<extra></extra>")


def _op_labels(profile, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    names = profile.ops["name"].to_numpy(dtype=object) if len(profile.ops) else np.array([], dtype=object)
    index = np.clip(first, 0, max(len(names) - 1, 0))
    label = np.array([f"#{i} {n}" for i, n in zip(first, names[index])], dtype=object) if len(names) else \
        np.array([f"#{i}" for i in first], dtype=object)
    spans = last != first
    label[spans] = [f"{lab} … #{j}" for lab, j in zip(label[spans], last[spans])]
    return label


def _bar(name, rows, labels, scale, colour, unit, legend, shade_busy=False):
    custom = np.column_stack([labels, rows["opcode"].to_numpy(dtype=object), rows["count"].to_numpy(),
                              rows["busy_ns"].to_numpy() / scale, rows["bytes_moved"].to_numpy(),
                              rows["flops"].to_numpy()])
    return go.Bar(
        name=name, orientation="h", y=rows["engine"].to_numpy(dtype=object),
        base=rows["start_ns"].to_numpy() / scale,
        x=(rows["end_ns"] - rows["start_ns"]).to_numpy() / scale,
        marker={"color": colour, "line": {"width": 0}, "opacity": _busy_opacity(rows) if shade_busy else 1.0},
        customdata=custom, hovertemplate=_HOVER.replace("{unit}", unit), legendgroup=legend,
        legendgrouptitle_text=legend)


def _busy_opacity(rows) -> np.ndarray:
    """A time bin spans idle gaps too; its opacity shows the fraction of the span that was busy."""
    span = (rows["end_ns"] - rows["start_ns"]).to_numpy()
    busy = np.divide(rows["busy_ns"].to_numpy(), span, out=np.ones_like(span), where=span > 0)
    return 0.12 + 0.88 * np.clip(busy, 0.0, 1.0)


def _ops_lane(profile, scale, unit):
    ops = profile.ops
    traces = []
    for kind, rows in ops.groupby("kind", sort=False):
        custom = np.column_stack([
            [f"#{i} {n}" for i, n in zip(rows["op_index"], rows["name"])], rows["kind"].to_numpy(dtype=object),
            rows["instruction_count"].to_numpy(), rows["time_ns"].to_numpy() / scale,
            rows["hbm_bytes"].to_numpy(), rows["flops"].to_numpy()])
        traces.append(go.Bar(
            name=kind, legendgroup="ops", legendgrouptitle_text="ops lane", orientation="h",
            y=np.full(len(rows), OPS_TRACK, dtype=object),
            base=rows["start_ns"].to_numpy() / scale, x=rows["time_ns"].to_numpy() / scale,
            marker={"color": KIND_COLOURS.get(kind, "#7f7f7f"), "line": {"width": 0}}, customdata=custom,
            hovertemplate=(_HOVER.replace("{unit}", unit).replace("bytes", "HBM bytes"))))
    return traces


def _key_colours(agg, key, keep) -> dict:
    """Opcode -> colour: the hue of the engine it mostly runs on, shaded per opcode."""
    engine_of = agg.groupby(key)["engine"].agg(lambda s: s.mode().iat[0])
    used: dict = {}
    out = {}
    for name in keep:
        base = engine_colour(engine_of[name])
        out[name] = shade(base, used.get(base, 0))
        used[base] = used.get(base, 0) + 1
    return out


def timeline_figure(profile, *, max_bars: int = 20_000, height: int | None = None) -> go.Figure:
    """Engine timeline of ``profile`` (a Profile or Trace); at most ``max_bars`` instruction bars."""
    profile = Profile.coerce(profile)
    title = f"Engine timeline: {profile.trace.device_kind} {profile.trace.target}"
    events = profile.instructions
    if not len(events) and not len(profile.ops):
        return empty_figure(title, "no instructions were recorded")
    t0 = min(events["start_ns"].min() if len(events) else np.inf, profile.ops["start_ns"].min())
    span = max(events["end_ns"].max() if len(events) else 0.0, profile.ops["end_ns"].max()) - t0
    scale, unit = time_scale(span)
    agg, level = aggregate_events(events, max_bars)
    by_engine = level == "bins"
    key = agg["engine"].map(engine_class) if by_engine else agg["opcode"]
    ranked = agg.groupby(key)["busy_ns"].sum().sort_values(ascending=False).index.tolist()
    keep = [k for k in ranked if k != MIXED][:_MAX_OPCODE_COLOURS]
    key = key.where(key.isin(keep), "other")
    colours = _key_colours(agg, key, keep) if not by_engine else {k: engine_colour(k) for k in keep}
    labels = _op_labels(profile, agg["op_index"].to_numpy(), agg["op_last"].to_numpy())
    traces = _ops_lane(profile, scale, unit)
    for name in keep + ["other"]:
        mask = (key == name).to_numpy()
        if mask.any():
            traces.append(_bar(name, agg[mask], labels[mask], scale, colours.get(name, "#b0b0b0"), unit,
                               "engine" if by_engine else "opcode", shade_busy=by_engine))
    fig = go.Figure(traces)
    tracks = [OPS_TRACK] + list(profile.timeline)
    if len(agg) < len(events):
        how = "time bins, shade = busy fraction" if by_engine else f"merged per {level}"
        title += (f"<br><sup>{len(events):,} instructions drawn as {len(agg):,} bars ({how}); "
                  "full detail: export_chrome_trace(full=True)</sup>")
    if profile.trace.events_dropped:
        title += f"<br><sup>{profile.trace.events_dropped:,} instructions beyond the trace's event cap not shown</sup>"
    base_layout(fig, title, height=height or max(300, 120 + 24 * len(tracks)), top=80)
    fig.update_layout(barmode="overlay", bargap=0.25, meta={"time_scale_ns": scale, "time_unit": unit})
    fig.update_xaxes(title_text=f"time ({unit})", rangemode="tozero", showgrid=True)
    fig.update_yaxes(title_text="engine / DMA queue", type="category", categoryorder="array",
                     categoryarray=tracks, autorange="reversed")
    return fig


def highlight_op(fig: go.Figure, profile, op_index: int | None) -> go.Figure:
    """Shade op ``op_index``'s time span on a timeline figure (in place); None clears it."""
    profile = Profile.coerce(profile)
    if op_index is None or not len(profile.ops):
        fig.layout.shapes = ()
        return fig
    row = profile.ops.loc[profile.ops["op_index"] == op_index]
    if not len(row):
        raise KeyError(f"no op with index {op_index}")
    scale = (fig.layout.meta or {}).get("time_scale_ns", 1.0)
    start, end = float(row["start_ns"].iloc[0]) / scale, float(row["end_ns"].iloc[0]) / scale
    fig.layout.shapes = ({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": end, "y0": 0,
                          "y1": 1, "fillcolor": "rgba(255, 190, 0, 0.22)",
                          "line": {"color": "rgba(230, 150, 0, 0.9)", "width": 1}, "layer": "above"},)
    return fig
