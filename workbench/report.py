"""Standalone HTML report of a Profile: summary, fallbacks, every figure, compiled graph text.

plotly.js is embedded once, inline, so the file opens offline with no kernel and no network.
"""
from __future__ import annotations

import html
import logging
from pathlib import Path

from workbench.html_parts import REPORT_STYLE, fallbacks_html, graph_html, summary_html
from workbench.presenters import presenter

__all__ = ["report_html", "save_html"]

log = logging.getLogger(__name__)


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
            f"<style>{REPORT_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<h2>summary</h2>{summary_html(summary)}"
            f"<h2>fallbacks</h2>{fallbacks_html(profile.fallbacks)}"
            + "".join(blocks) + "".join(graph_html(g) for g in profile.graphs) + "</body></html>")


@presenter("profile.save_html")
def save_html(profile, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(profile), encoding="utf-8")
    log.info("wrote report %s (%d bytes)", path, path.stat().st_size)
    return path
