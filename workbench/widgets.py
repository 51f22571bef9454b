"""The Jupyter dashboard: tabs summary, timeline, ops, memory, roofline, graphs, fallbacks.

Built once and updated in place (``update(profile)``), so a notebook cell that re-profiles does
not stack new outputs. ipywidgets and plotly's FigureWidget are imported inside the class, so
``import workbench`` never pulls in ipywidgets or IPython.
"""
from __future__ import annotations

import logging

from workbench.figures import (graph_figure, highlight_op, memory_figure, roofline_figure, timeline_figure,
                               utilisation_figure)
from workbench.figures.utilisation import op_table
from workbench.format import fmt_bytes, fmt_count, fmt_time_s
from workbench.html_parts import fallbacks_html, graph_html, html_table, summary_html
from workbench.presenters import presenter
from workbench.profiles import Profile

__all__ = ["Dashboard", "show_dashboard", "TABS", "OP_SORT_KEYS"]

log = logging.getLogger(__name__)

TABS = ("summary", "timeline", "ops", "memory", "roofline", "graphs", "fallbacks")
OP_SORT_KEYS = (("time", "time"), ("execution order", "order"), ("FLOPs", "flops"), ("HBM bytes", "hbm_bytes"))
_MAX_LISTED_OPS = 500        # a Select with thousands of options is slow to render


def _replace_figure(widget, fig) -> None:
    """Swap a FigureWidget's traces and layout for ``fig``'s without creating a new widget."""
    widget.data = ()
    widget.layout = fig.layout
    widget.add_traces(list(fig.data))


class Dashboard:
    """Tabs of figures and tables for one Profile; choose an op to highlight it on the timeline."""

    def __init__(self, profile=None, *, max_bars: int = 20_000):
        import ipywidgets as w
        import plotly.graph_objects as go

        self.profile = None
        self.max_bars = max_bars
        self.summary_html = w.HTML()
        self.timeline = go.FigureWidget()
        self.utilisation = go.FigureWidget()
        self.memory = go.FigureWidget()
        self.roofline = go.FigureWidget()
        self.graph = go.FigureWidget()
        self.graph_select = w.Dropdown(description="graph", options=[])
        self.graph_text = w.HTML()
        self.fallbacks_html = w.HTML()
        self.sort = w.Dropdown(description="sort by", options=OP_SORT_KEYS, value="time")
        self.filter = w.Text(description="filter", placeholder="name, kind, shape or source")
        self.op_select = w.Select(options=[], rows=14, layout=w.Layout(width="100%"))
        self.op_detail = w.HTML()
        ops_tab = w.VBox([w.HBox([self.sort, self.filter]), self.op_select, self.op_detail, self.utilisation])
        graphs_tab = w.VBox([self.graph_select, self.graph, self.graph_text])
        children = [self.summary_html, self.timeline, ops_tab, self.memory, self.roofline, graphs_tab,
                    self.fallbacks_html]
        self.widget = w.Tab(children=children, titles=TABS)
        self.sort.observe(lambda _: self._refresh_ops(), names="value")
        self.filter.observe(lambda _: self._refresh_ops(), names="value")
        self.op_select.observe(lambda change: self.select_op(change["new"]), names="value")
        self.graph_select.observe(lambda change: self._show_graph(change["new"]), names="value")
        if profile is not None:
            self.update(profile)

    # -- content ---------------------------------------------------------------------------
    def update(self, profile) -> "Dashboard":
        """Show ``profile`` (a Profile or Trace) in the existing widgets."""
        self.profile = profile = Profile.coerce(profile)
        self.summary_html.value = summary_html(profile.summary)
        _replace_figure(self.timeline, timeline_figure(profile, max_bars=self.max_bars))
        _replace_figure(self.memory, memory_figure(profile))
        _replace_figure(self.roofline, roofline_figure(profile))
        self.fallbacks_html.value = fallbacks_html(profile.fallbacks)
        self.graph_select.options = [(g.name, i) for i, g in enumerate(profile.graphs)]
        self.graph_select.value = 0 if profile.graphs else None
        self._show_graph(self.graph_select.value)
        self.op_select.value = None         # op indices of the old profile mean nothing here
        self._refresh_ops()
        return self

    def _show_graph(self, index) -> None:
        graphs = self.profile.graphs if self.profile is not None else []
        if index is None or not graphs:
            _replace_figure(self.graph, graph_figure({"name": "(none)", "nodes": []}))
            self.graph_text.value = "<p>No compiled graphs in this profile.</p>"
            return
        graph = graphs[index]
        _replace_figure(self.graph, graph_figure(graph))
        self.graph_text.value = graph_html(graph)

    def filtered_ops(self):
        """The op table as the sort and filter controls currently select it."""
        table = op_table(self.profile, group_by="op", sort=self.sort.value)
        text = self.filter.value.strip().lower()
        if text:
            haystack = (table["name"].astype(str) + " " + table["kind"].astype(str) + " "
                        + table.get("input_shapes", "").astype(str) + " " + table.get("source", "").astype(str))
            table = table[haystack.str.lower().str.contains(text, regex=False)]
        return table

    def _refresh_ops(self) -> None:
        if self.profile is None:
            return
        table = self.filtered_ops()
        listed = table.head(_MAX_LISTED_OPS)
        options = [(f"#{r.op_index:<5} {r.name:<32} {fmt_time_s(r.time_ns * 1e-9):>9}  {fmt_count(r.flops):>6} FLOP"
                    f"  {fmt_bytes(r.hbm_bytes):>10}  {r.kind}", int(r.op_index)) for r in listed.itertuples()]
        # Setting options selects the first one; keep the user's choice instead (or none).
        chosen = self.op_select.value
        self.op_select.options = options
        self.op_select.value = chosen if any(v == chosen for _, v in options) else None
        if self.op_select.value is None:
            self.select_op(None)
        shown = f"{len(listed)} of {len(table)}" if len(table) > len(listed) else str(len(table))
        self.op_detail.value = f"<p>{shown} ops match; choose one to highlight it on the timeline.</p>"
        _replace_figure(self.utilisation, utilisation_figure(self.profile, sort=self.sort.value))

    def select_op(self, op_index) -> None:
        """Highlight ``op_index`` on the timeline (in place) and show its details; None clears."""
        highlight_op(self.timeline, self.profile, op_index)
        if op_index is None:
            return
        row = self.profile.ops.loc[self.profile.ops["op_index"] == op_index].iloc[0]
        fields = (("op", f"#{op_index} {row['name']} ({row['kind']})"), ("time", fmt_time_s(row["time_ns"] * 1e-9)),
                  ("inputs", row.get("input_shapes", "")), ("outputs", row.get("output_shapes", "")),
                  ("FLOPs", fmt_count(row["flops"])), ("HBM bytes", fmt_bytes(row["hbm_bytes"])),
                  ("source", row.get("source") or "unknown"))
        self.op_detail.value = html_table(fields, ("field", "value"))

    # -- display ---------------------------------------------------------------------------
    def display(self) -> None:
        from IPython.display import display
        display(self.widget)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


@presenter("profile.show")
def show_dashboard(profile) -> Dashboard:
    """Display the dashboard of ``profile`` (Jupyter) and return it: ``Profile.show()``."""
    dash = Dashboard(profile)
    dash.display()
    return dash
