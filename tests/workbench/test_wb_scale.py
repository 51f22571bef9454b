"""A GPT-2-small step (~5k ops, ~300k instructions): figures, dashboard and exports stay bounded.

No timed assertions (the machine is shared); sizes are what keep it fast, so sizes are checked.
The timings are printed by ``benchmarks``-style runs, not here.
"""
from __future__ import annotations

import json

import pytest

from workbench.export import DEFAULT_MAX_EVENTS
from workbench.profiles import Profile

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big(big_trace):
    assert len(big_trace.ops) > 4_900 and len(big_trace.events) > 280_000
    return Profile(big_trace)


def test_figures_downsample_the_timeline(big):
    figures = big.figures()
    timeline = figures["timeline"]
    engine_bars = [t for t in timeline.data if t.legendgroup != "ops"]
    assert sum(len(t.x) for t in engine_bars) <= 20_000
    assert "drawn as" in timeline.layout.title.text
    assert len(figures["utilisation"].data[0].y) <= 30


def test_dashboard_builds_for_the_big_trace(big):
    pytest.importorskip("ipywidgets")
    from workbench.widgets import Dashboard
    dash = Dashboard(big)
    assert len(dash.op_select.options) == 500 and "500 of" in dash.op_detail.value


def test_default_export_is_capped_and_loads(big, tmp_path):
    path = big.export_chrome_trace(tmp_path / "big.json")
    assert path.stat().st_size < 20_000_000
    data = json.loads(path.read_text())
    device_events = [e for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert len(device_events) <= DEFAULT_MAX_EVENTS
    assert Profile.load(path).summary == big.summary
