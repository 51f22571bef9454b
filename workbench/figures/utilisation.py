"""Per-op engine utilisation: busy time of each engine class per op, as stacked bars.

Engines overlap in time, so a bar can be longer than the op's wall time (shown as a marker):
the gap between the two is how much the engines ran in parallel.
"""
from __future__ import annotations

import plotly.graph_objects as go

from workbench.figures.style import ENGINE_COLOURS, base_layout, dma_queues, empty_figure, time_scale
from workbench.profiles import Profile

__all__ = ["utilisation_figure", "op_table", "SORT_KEYS"]

SORT_KEYS = ("time", "order", "flops", "hbm_bytes")


def op_table(profile, *, group_by: str = "name", sort: str = "time"):
    """Rows of the utilisation chart: one per op (``group_by="op"``) or per op name, summed."""
    ops = profile.ops
    busy = [c for c in ops.columns if c.endswith("_busy_ns")]
    if group_by == "name":
        table = ops.groupby("name", sort=False).agg(
            count=("op_index", "size"), order=("op_index", "min"), kind=("kind", "first"),
            **{c: (c, "sum") for c in busy + ["time_ns", "flops", "hbm_bytes"]}).reset_index()
        table["label"] = [f"{n} ×{c}" if c > 1 else n for n, c in zip(table["name"], table["count"])]
    elif group_by == "op":
        table = ops.assign(order=ops["op_index"], count=1)
        table["label"] = [f"#{i} {n}" for i, n in zip(ops["op_index"], ops["name"])]
    else:
        raise ValueError(f"group_by must be 'name' or 'op', not {group_by!r}")
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {SORT_KEYS}, not {sort!r}")
    by, ascending = ("order", True) if sort == "order" else (f"{sort}_ns" if sort == "time" else sort, False)
    return table.sort_values(by, ascending=ascending, kind="stable", ignore_index=True)


def utilisation_figure(profile, *, group_by: str | None = None, sort: str = "time", top: int = 30,
                       height: int | None = None) -> go.Figure:
    """Stacked busy time per engine class for the ``top`` ops (or op names) by ``sort``.

    ``group_by`` defaults to "op" for short runs and "name" (sum over calls) beyond 60 ops.
    """
    profile = Profile.coerce(profile)
    title = f"Engine busy time per op: {profile.trace.device_kind} {profile.trace.target}"
    if not len(profile.ops):
        return empty_figure(title, "no ops were recorded")
    group_by = group_by or ("op" if len(profile.ops) <= 60 else "name")
    table = op_table(profile, group_by=group_by, sort=sort).head(top)
    scale, unit = time_scale(float(table["time_ns"].max()))
    engines = [c[:-len("_busy_ns")] for c in table.columns if c.endswith("_busy_ns")]
    engines = [e for e in ENGINE_COLOURS if e in engines] + sorted(set(engines) - set(ENGINE_COLOURS))
    queues = dma_queues(profile.trace)
    fig = go.Figure()
    for engine in engines:
        values = table[f"{engine}_busy_ns"] / scale / (queues if engine == "dma" else 1)
        if not values.any():
            continue
        name = f"dma (mean of {queues} queues)" if engine == "dma" and queues > 1 else engine
        fig.add_bar(name=name, orientation="h", y=table["label"], x=values,
                    marker_color=ENGINE_COLOURS.get(engine, "#7f7f7f"),
                    hovertemplate=f"%{{y}}<br>{name} busy %{{x:.4g}} {unit}<extra></extra>")
    fig.add_scatter(name="wall time", mode="markers", y=table["label"], x=table["time_ns"] / scale,
                    marker={"symbol": "line-ns-open", "size": 14, "color": "black", "line": {"width": 2}},
                    hovertemplate=f"%{{y}}<br>wall time %{{x:.4g}} {unit}<extra></extra>")
    what = "op names (summed over calls)" if group_by == "name" else "ops"
    order = "in execution order" if sort == "order" else f"by {sort.replace('_', ' ')}"
    base_layout(fig, f"{title}<br><sup>top {len(table)} {what}, {order}</sup>",
                height=height or max(320, 110 + 20 * len(table)), legend_title="engine")
    fig.update_layout(barmode="stack", bargap=0.2)
    fig.update_xaxes(title_text=f"engine busy time ({unit})")
    fig.update_yaxes(title_text="op", autorange="reversed", type="category", automargin=True)
    return fig
