"""HTML written once: the table helper, the report stylesheet, and the summary, fallback and
compiled-graph sections that the dashboard, the standalone report and ``Profile._repr_html_``
share. Every function takes plain data (a summary dict, a fallbacks DataFrame, graphs) and
returns an HTML fragment; nothing here imports a Profile.
"""
from __future__ import annotations

import html

from workbench.format import fmt_bytes, fmt_time_s, summary_rows

__all__ = ["html_table", "summary_html", "fallbacks_html", "graph_html", "REPORT_STYLE", "NOTE_STYLE"]

# The stylesheet of the standalone HTML reports (profile and migration).
REPORT_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table.wb { border-collapse: collapse; font-size: 13px; }
table.wb th, table.wb td { padding: 3px 10px; border-bottom: 1px solid #eee; }
table.wb th { text-align: left; } table.wb td { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 12px; }
.note { color: #666; font-size: 13px; }
"""
# Inline, so a note looks the same in a widget (no stylesheet) and in a report.
NOTE_STYLE = "color:#666"
_CELL = "padding:2px 8px"


def html_table(rows, header=None, *, caption: str | None = None, row_headers: bool = False,
               align: str = "left") -> str:
    """An HTML table of ``rows`` (sequences of cells, shown with ``str``, escaped).

    ``header``: column titles; ``row_headers``: the first cell of each row is a ``<th>``;
    ``align``: of the other cells ("left", or "right" for columns of numbers). Styles are inline
    so the table looks the same in a notebook output, a widget and a standalone report.
    """
    def cell(tag: str, value, side: str) -> str:
        return f"<{tag} style='text-align:{side};{_CELL}'>{html.escape(str(value))}</{tag}>"

    head = ("<tr>" + "".join(cell("th", h, "left") for h in header) + "</tr>") if header else ""
    body = "".join("<tr>" + "".join(cell("th", c, "left") if i == 0 and row_headers else cell("td", c, align)
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    title = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return f"<table class='wb' style='border-collapse:collapse'>{title}{head}{body}</table>"


def summary_html(summary: dict, *, caption: str | None = None) -> str:
    """The summary metrics of a profile, one labelled row each."""
    return html_table(summary_rows(summary), caption=caption, row_headers=True, align="right")


def fallbacks_html(fallbacks) -> str:
    """The ops that ran on the host (``Profile.fallbacks``), or a note that none did."""
    if not len(fallbacks):
        return f"<p style='{NOTE_STYLE}'>No op fell back to the host.</p>"
    return html_table([(r.name, r.count, fmt_time_s(r.time_ns * 1e-9), fmt_time_s(r.host_busy_ns * 1e-9),
                        fmt_bytes(r.hbm_bytes), r.sources) for r in fallbacks.itertuples()],
                      ("op", "calls", "time", "host time", "bytes moved", "source"))


def graph_html(graph) -> str:
    """A compiled graph's FX text (folded) and its graph breaks."""
    breaks = "".join(f"<li>{html.escape(b)}</li>" for b in graph.graph_breaks)
    return (f"<details><summary>{html.escape(graph.name)}: FX graph</summary>"
            f"<pre>{html.escape(graph.fx_text or '(no text)')}</pre></details>"
            + (f"<p>Graph breaks:</p><ul>{breaks}</ul>" if breaks else ""))
