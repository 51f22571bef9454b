"""Shared look of the workbench figures: template, sizes, engine colours, units."""
from __future__ import annotations

import plotly.graph_objects as go

from backend.sim.trace import engine_class

__all__ = ["ENGINE_COLOURS", "KIND_COLOURS", "LEVEL_COLOURS", "base_layout", "engine_colour",
           "palette", "shade", "empty_figure", "time_scale", "dma_queues"]

# One colour per engine class so a track reads the same in every figure.
ENGINE_COLOURS = {
    "tensor": "#1f77b4", "vector": "#2ca02c", "scalar": "#ff7f0e", "gpsimd": "#9467bd",
    "dma": "#8c8c8c", "host": "#d62728",
    "tensor_core": "#1f77b4", "cuda_core": "#2ca02c", "hbm": "#8c8c8c", "copy": "#bcbd22",
}
# Kinds avoid the engine hues so the ops lane does not read as an engine.
KIND_COLOURS = {"op": "#4d4d4d", "kernel": "#17becf", "fallback": "#d62728", "transfer": "#bcbd22",
                "view": "#c7c7c7"}
LEVEL_COLOURS = {"hbm": "#1f77b4", "sbuf": "#2ca02c", "psum": "#ff7f0e"}
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39",
            "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")


def dma_queues(trace) -> int:
    """DMA queue tracks of a trace's target; busy time summed over queues is divided by this so
    DMA reads on the same scale as one engine (and as wall time)."""
    return max(1, sum(1 for e in trace.engines if engine_class(e) == "dma"))


def engine_colour(engine: str) -> str:
    return ENGINE_COLOURS.get(engine_class(engine), "#7f7f7f")


def shade(colour: str, k: int) -> str:
    """The k-th variant of a hex colour: 0 is the colour, then alternately lighter and darker."""
    if k == 0:
        return colour
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    amount = 0.22 * ((k + 1) // 2)
    if k % 2:       # lighter: mix with white
        r, g, b = (round(c + (255 - c) * min(amount, 0.8)) for c in (r, g, b))
    else:           # darker: mix with black
        r, g, b = (round(c * max(1 - amount, 0.3)) for c in (r, g, b))
    return f"#{r:02x}{g:02x}{b:02x}"


def palette(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def time_scale(span_ns: float) -> tuple[float, str]:
    """Divisor and unit so a span of ``span_ns`` reads in sensible numbers (ns, us or ms)."""
    if span_ns >= 5e6:
        return 1e6, "ms"
    if span_ns >= 5e3:
        return 1e3, "µs"
    return 1.0, "ns"


def base_layout(fig: go.Figure, title: str, *, height: int = 450, legend_title: str | None = None,
                top: int = 60) -> go.Figure:
    """Title, white template and margins that fit a ~900 px notebook column.

    ``top``: room above the plot; subplot figures with a subtitle need ~100 px.
    """
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        template="plotly_white", height=height, autosize=True,
        margin={"l": 70, "r": 20, "t": top, "b": 55},
        font={"size": 12}, hoverlabel={"namelength": -1},
        legend={"title": {"text": legend_title} if legend_title else None},
    )
    return fig


def empty_figure(title: str, message: str, *, height: int = 300) -> go.Figure:
    """A figure that says why there is nothing to draw, instead of empty axes."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 14, "color": "#555"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return base_layout(fig, title, height=height)
