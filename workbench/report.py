"""Standalone HTML report of a Profile: summary, fallbacks, every figure, compiled graph text.

plotly.js is embedded once, inline, so the file opens offline with no kernel and no network.
"""
from __future__ import annotations

import html
import logging
from pathlib import Path

from workbench.format import fmt_bytes, fmt_time_s, summary_rows

__all__ = ["report_html", "save_html"]

log = logging.getLogger(__name__)

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table.wb { border-collapse: collapse; font-size: 13px; }
table.wb th, table.wb td { padding: 3px 10px; border-bottom: 1px solid #eee; }
table.wb th { text-align: left; } table.wb td { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 12px; }
.note { color: #666; font-size: 13px; }
"""


def _table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header) if header else ""
    body = "".join("<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(str(c))}</{'th' if i == 0 else 'td'}>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table class='wb'>{'<tr>' + head + '</tr>' if head else ''}{body}</table>"


def _fallback_section(profile) -> str:
    fb = profile.fallbacks
    if not len(fb):
        return "<p class='note'>No op fell back to the host.</p>"
    rows = [(r.name, r.count, fmt_time_s(r.time_ns * 1e-9), fmt_time_s(r.host_busy_ns * 1e-9),
             fmt_bytes(r.hbm_bytes), r.sources) for r in fb.itertuples()]
    return _table(("op", "calls", "time", "host time", "bytes moved", "source"), rows)


def _graph_text(profile) -> str:
    parts = []
    for graph in profile.graphs:
        breaks = "".join(f"<li>{html.escape(b)}</li>" for b in graph.graph_breaks)
        parts.append(f"<details><summary>{html.escape(graph.name)}: FX graph</summary>"
                     f"<pre>{html.escape(graph.fx_text or '(no text)')}</pre>"
                     + (f"<p>Graph breaks:</p><ul>{breaks}</ul>" if breaks else "") + "</details>")
    return "".join(parts)


def report_html(profile, *, title: str | None = None) -> str:
    """The report as one HTML string."""
    figures = profile.figures()
    summary = profile.summary
    title = title or f"Workbench profile: {summary['device_kind']} {summary['target']}"
    blocks = []
    for i, (name, fig) in enumerate(figures.items()):
        # First figure carries plotly.js inline; the rest reuse it.
        blocks.append(f"<h2>{html.escape(name.split(':')[-1] if name.startswith('graph:') else name)}</h2>")
        blocks.append(fig.to_html(full_html=False, include_plotlyjs=i == 0, default_width="100%",
                                  config={"displaylogo": False, "responsive": True}))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<h2>summary</h2>{_table(None, summary_rows(summary))}"
            f"<h2>fallbacks</h2>{_fallback_section(profile)}"
            + "".join(blocks) + _graph_text(profile) + "</body></html>")


def save_html(profile, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(profile), encoding="utf-8")
    log.info("wrote report %s (%d bytes)", path, path.stat().st_size)
    return path
