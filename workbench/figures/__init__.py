"""Plotly figures of a Profile, one module per figure; each function returns a ``go.Figure``."""
from __future__ import annotations

from workbench.figures.comparison import comparison_figure, profiles_figure
from workbench.figures.display import display_figure
from workbench.figures.graph import graph_figure
from workbench.figures.memory import memory_figure
from workbench.figures.price import price_performance_figure
from workbench.figures.roofline import roofline_figure
from workbench.figures.serving import kv_occupancy_figure, latency_cdf_figure
from workbench.figures.timeline import highlight_op, timeline_figure
from workbench.figures.utilisation import utilisation_figure
from workbench.presenters import presenter

__all__ = ["timeline_figure", "highlight_op", "utilisation_figure", "memory_figure", "roofline_figure",
           "graph_figure", "comparison_figure", "profiles_figure", "price_performance_figure", "profile_figures",
           "display_figure", "latency_cdf_figure", "kv_occupancy_figure"]


@presenter("profile.figures")
def profile_figures(profile) -> dict:
    """The dashboard's figures by name: timeline, utilisation, memory, roofline, pipeline (one
    lane per stage, when the run joined a pipeline step), graph:<name>..."""
    out = {"timeline": timeline_figure(profile), "utilisation": utilisation_figure(profile),
           "memory": memory_figure(profile), "roofline": roofline_figure(profile)}
    if profile.pipeline is not None:
        out["pipeline"] = profile.pipeline.figure()
    for i, graph in enumerate(profile.graphs):
        out[f"graph:{i}:{graph.name}"] = graph_figure(graph)
    return out
