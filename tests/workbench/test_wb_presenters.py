"""Profile holds data: its views and files are presenters registered by the modules that make
them, so workbench.profiles imports none of those modules (not even inside a function)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import workbench
from workbench import presenters
from workbench.html_parts import fallbacks_html, graph_html, html_table, summary_html
from workbench.profiles import Profile
from wb_graph import attention_graph

PRESENTATION = ("workbench.export", "workbench.figures", "workbench.widgets", "workbench.report",
                "workbench.tables")


def test_profiles_imports_no_presentation_module():
    tree = ast.parse(Path(workbench.__file__).with_name("profiles.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    bad = {m for m in imported if any(m == p or m.startswith(p + ".") for p in PRESENTATION)}
    assert not bad, bad


def test_a_presenter_name_is_registered_once(monkeypatch):
    monkeypatch.setattr(presenters, "_PRESENTERS", {})
    presenters.presenter("test.view")(len)
    with pytest.raises(ValueError, match="already registered"):
        presenters.presenter("test.view")(str)
    with pytest.raises(ValueError, match="is provided by workbench.widgets"):
        presenters.provide("workbench.report", "profile.show")


def test_present_imports_the_provider_on_first_use(monkeypatch):
    monkeypatch.setattr(presenters, "_PRESENTERS", {})
    monkeypatch.setitem(presenters._PROVIDERS, "test.len", "math")   # math registers nothing
    with pytest.raises(RuntimeError, match="registered none"):
        presenters.present("test.len", [])
    with pytest.raises(LookupError, match="no presenter named 'nope'"):
        presenters.present("nope")


def test_profile_files_go_through_their_presenters(small_trace, tmp_path):
    prof = Profile(small_trace)
    assert prof.save_html(tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    again = Profile.load(prof.export_chrome_trace(tmp_path / "t.json"))
    assert again.summary["op_count"] == prof.summary["op_count"]
    assert set(prof.figures()) >= {"timeline", "utilisation", "memory", "roofline"}


def test_html_table_escapes_and_marks_row_headers():
    text = html_table([("<a>", 1)], ("name", "n"), row_headers=True, caption="c&d")
    assert "&lt;a&gt;</th>" in text and ">1</td>" in text and "<b>c&amp;d</b>" in text
    assert text.count("<tr>") == 2 and text.startswith("<table")


def test_the_report_and_the_dashboard_share_the_fallback_and_graph_sections(small_trace):
    pytest.importorskip("ipywidgets")
    from workbench.report import report_html
    from workbench.widgets import Dashboard
    prof = Profile(small_trace, [attention_graph()])
    section, graph = fallbacks_html(prof.fallbacks), graph_html(prof.graphs[0])
    assert "aten::_unique2" in section
    dash = Dashboard(prof)
    assert dash.fallbacks_html.value == section and dash.graph_text.value == graph
    text = report_html(prof)
    assert section in text and graph in text and summary_html(prof.summary) in text
