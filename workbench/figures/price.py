"""Price-performance side by side: time, MFU and cost per 1M tokens of the same model on each
simulated device (e.g. H100 / trn2 / TPU v6e), from a ``Comparison.frame`` or any frame with
its columns (the migration report's performance table priced by ``workbench.pricing``)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import base_layout, empty_figure, palette, time_scale

__all__ = ["price_performance_figure"]

_DEVICE_ORDER = ("cuda", "neuron", "tpu")


def price_performance_figure(frame: pd.DataFrame, *, title: str = "Time, MFU and cost",
                             height: int = 430) -> go.Figure:
    """Three panels, one bar per simulated row: step time, MFU and USD per 1M tokens (or steps).

    ``frame`` needs ``label``, ``device``, ``time_s``, ``mfu_percent``, ``usd_per_1m_items`` and
    ``items_unit``; rows without simulated time or without a price (cpu) are left out of the
    panels they cannot fill.
    """
    simulated = frame[frame["time_kind"] == "simulated"] if "time_kind" in frame else frame
    if not len(simulated):
        return empty_figure(title, "no simulated device to compare")
    order = {d: i for i, d in enumerate(_DEVICE_ORDER)}
    rows = simulated.assign(_order=simulated["device"].map(order).fillna(len(order))).sort_values(
        "_order", kind="stable")
    unit = str(rows["items_unit"].iloc[0]) if "items_unit" in rows else "steps"
    scale, time_unit = time_scale(float(rows["time_s"].max()) * 1e9)
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.1,
                        subplot_titles=(f"step time ({time_unit})", "MFU (%)", f"USD per 1M {unit}"))
    colours = [palette(_DEVICE_ORDER.index(d) if d in _DEVICE_ORDER else 3) for d in rows["device"]]
    labels = rows["label"].astype(str)
    panels = ((rows["time_s"] * 1e9 / scale, f"%{{y:.4g}} {time_unit}"), (rows["mfu_percent"], "%{y:.2f} %"),
              (rows["usd_per_1m_items"], "$%{y:.4g}"))
    for col, (values, hover) in enumerate(panels, start=1):
        fig.add_bar(row=1, col=col, x=labels, y=values, marker_color=colours, showlegend=False,
                    hovertemplate=f"%{{x}}<br>{hover}<extra></extra>")
    priced = rows.dropna(subset=["usd_per_1m_items"])
    note = "simulated time; price: on-demand list price per device (backend.sim.pricing)"
    if len(priced) > 1:
        best = priced.loc[priced["items_per_usd"].idxmax()]
        note = f"most {unit} per dollar: {best['label']}; " + note
    base_layout(fig, f"{title}<br><sup>{note}</sup>", height=height, top=100)
    fig.update_yaxes(row=1, col=1, title_text=time_unit)
    fig.update_yaxes(row=1, col=2, title_text="%")
    fig.update_yaxes(row=1, col=3, title_text="USD", tickprefix="$")
    return fig
