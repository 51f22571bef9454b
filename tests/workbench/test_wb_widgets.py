"""The dashboard builds once, updates in place, sorts/filters ops and highlights the chosen one."""
from __future__ import annotations

import subprocess
import sys

import pytest

from workbench.profiles import Profile
from wb_graph import attention_graph
from wb_synth import transformer_trace

pytest.importorskip("ipywidgets")


@pytest.fixture
def dash(small_trace):
    from workbench.widgets import Dashboard
    return Dashboard(Profile(small_trace, [attention_graph()]))


def test_tabs_and_content(dash, small_trace):
    from workbench.widgets import TABS
    assert tuple(dash.widget.titles) == TABS
    assert "simulated time" in dash.summary_html.value
    assert len(dash.op_select.options) == len(small_trace.ops)
    assert "aten::_unique2" in dash.fallbacks_html.value
    assert dash.graph_select.options == (("forward_0", 0),)
    assert any(t.name.startswith("k2_attn") for t in dash.graph.data)
    assert len(dash.timeline.data) > 4 and dash.timeline.layout.yaxis.categoryarray[0] == "ops"


def test_sort_and_filter_the_op_list(dash):
    first = dash.op_select.options[0][0]
    assert "aten::_unique2" in first                       # sorted by time: the fallback is slowest
    dash.sort.value = "order"
    assert [v for _, v in dash.op_select.options][:3] == [0, 1, 2]
    dash.filter.value = "GELU"
    assert [label.split()[1] for label, _ in dash.op_select.options] == ["aten::gelu", "aten::gelu"]
    dash.filter.value = "model.py:33"
    assert {label.split()[1] for label, _ in dash.op_select.options} == {"aten::_unique2"}


def test_choosing_an_op_highlights_it_in_place(dash, small_trace):
    timeline = dash.timeline
    dash.op_select.value = 7
    assert dash.timeline is timeline
    (shape,) = timeline.layout.shapes
    scale = timeline.layout.meta["time_scale_ns"]
    assert shape.x0 * scale == pytest.approx(small_trace.ops[7].start_ns)
    assert "#7 aten::add" in dash.op_detail.value and "model.py:26" in dash.op_detail.value


def test_update_reuses_the_widgets(dash):
    widgets = (dash.widget, dash.timeline, dash.memory, dash.op_select)
    dash.op_select.value = 3
    dash.update(Profile(transformer_trace(1)))
    assert (dash.widget, dash.timeline, dash.memory, dash.op_select) == widgets
    assert len(dash.op_select.options) == 14 and dash.timeline.layout.shapes == ()
    assert "No compiled graphs" in dash.graph_text.value
    dash.update(Profile())
    assert dash.op_select.options == ()


def test_importing_the_workbench_does_not_import_widgets_or_ipython():
    code = ("import sys, workbench, workbench.profiles, workbench.figures, workbench.export, workbench.session, "
            "workbench.comparison, workbench.cli, workbench.widgets, workbench.report\n"
            "bad = [m for m in ('ipywidgets', 'IPython', 'anywidget') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_live_figures_are_anywidgets():
    """Why pyproject declares anywidget: plotly's FigureWidget is one, and plotly does not
    require it. When this fails, plotly changed its widget base and the dependency can go."""
    anywidget = pytest.importorskip("anywidget")
    import plotly.graph_objects as go
    assert issubclass(go.FigureWidget, anywidget.AnyWidget)


def test_profile_show_displays_the_dashboard_through_its_presenter(small_trace, monkeypatch):
    import IPython.display
    from workbench.widgets import Dashboard
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    dash = Profile(small_trace).show()
    assert isinstance(dash, Dashboard) and shown == [dash.widget]
