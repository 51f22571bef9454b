"""Views of a MigrationReport: plotly figures, HTML sections, the notebook widget.

The HTML report embeds plotly.js once, inline, so it opens offline; ``_repr_html_`` shows the
same sections without figures (no script needed). ipywidgets is imported only by ``widget``.
"""
from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from workbench.figures.price import price_performance_figure
from workbench.figures.style import KIND_COLOURS, base_layout, empty_figure, palette
from workbench.format import fmt_bytes, fmt_time_s, fmt_usd
from workbench.html_parts import REPORT_STYLE
from workbench.migration.chips import chips_sections
from workbench.migration.memory import CATEGORIES
from workbench.migration.price import price_line, timing_notes

__all__ = ["findings", "report_figures", "sections", "report_html", "widget"]

_STATUS_COLOURS = {"lowered": KIND_COLOURS["op"], "lowered (fused)": KIND_COLOURS["kernel"],
                   "host fallback": KIND_COLOURS["fallback"], "host<->device transfer": KIND_COLOURS["transfer"],
                   "view (no device work)": KIND_COLOURS["view"]}
_TOP_OPS = 25
# section -> the figures shown under it
_FIGURES_BY_SECTION = {"performance": ("performance", "price-performance", "time breakdown"), "op coverage": ("op coverage",),
                       "numerics": ("numerics",), "memory": ("memory",)}


# -- figures ------------------------------------------------------------------------------
def performance_figure(report) -> go.Figure:
    perf = report.performance
    fig = go.Figure(go.Bar(x=perf["label"], y=perf["step_time_s"] * 1e3,
                           marker_color=[palette(0) if r == "target" else palette(1) for r in perf["role"]],
                           text=[f"MFU {m:.1f} %" for m in perf["mfu_percent"]], textposition="outside",
                           hovertemplate="%{x}: %{y:.4g} ms<extra></extra>"))
    fig.update_yaxes(title="simulated time per step (ms)")
    return base_layout(fig, f"Step time: {report.target} vs {report.baseline}", height=380)


def breakdown_figure(report) -> go.Figure:
    frame = report.time_breakdown
    fig = go.Figure()
    for i, (mode, rows) in enumerate(frame.groupby("mode", sort=False)):
        fig.add_trace(go.Bar(y=rows["where"], x=rows["percent_of_step"], name=mode, orientation="h",
                             marker_color=palette(i), customdata=rows["note"],
                             hovertemplate="%{y}: %{x:.1f} % of the step<br>%{customdata}<extra>" + mode + "</extra>"))
    fig.update_xaxes(title="% of the step (engines overlap)")
    fig.update_yaxes(autorange="reversed")
    return base_layout(fig, f"Where the {report.target} step time goes", height=360, legend_title="mode")


def coverage_figure(report) -> go.Figure:
    cov = report.coverage.sort_values("time_ns", ascending=False).head(_TOP_OPS)
    if not len(cov):
        return empty_figure("Op coverage", "no op was recorded")
    fig = go.Figure()
    for status, rows in cov.groupby("status", sort=False):
        fig.add_trace(go.Bar(x=rows["op"], y=rows["time_ns"] * 1e-3, name=status,
                             marker_color=_STATUS_COLOURS.get(status, "#7f7f7f"), customdata=rows["calls"],
                             hovertemplate="%{x}: %{y:.4g} us over %{customdata} calls<extra>" + status + "</extra>"))
    fig.update_yaxes(title="simulated time in the step (us)")
    fig.update_xaxes(categoryorder="total descending", tickangle=-40)
    return base_layout(fig, f"Op coverage on {report.target} (costliest {_TOP_OPS} ops)", height=420)


def numerics_figure(report) -> go.Figure:
    layers = report.numerics.layers
    if not len(layers):
        return empty_figure("Numerics", "no layer output to compare")
    fig = go.Figure(go.Bar(x=layers["layer"], y=layers["rel_error_mean"].clip(lower=1e-9),
                           marker_color=["#d62728" if f else palette(0) for f in layers["flagged"]],
                           customdata=layers[["type", "rel_error_max"]],
                           hovertemplate="%{x} (%{customdata[0]}): mean %{y:.3g}, "
                                         "max %{customdata[1]:.3g}<extra></extra>"))
    fig.add_hline(y=report.numerics.threshold, line_dash="dash", line_color="#d62728",
                  annotation_text=f"threshold {report.numerics.threshold:g}")
    fig.update_yaxes(type="log", title="relative error (sum|d| / sum|ref|)")
    fig.update_xaxes(tickangle=-40)
    return base_layout(fig, f"Per-layer drift: {report.numerics.compared}", height=420)


def memory_figure(report) -> go.Figure:
    """HBM live at each phase's peak at the measured batch, stacked by category."""
    mem = report.memory
    parts = mem.phase_breakdown(mem.batch_size)
    fig = go.Figure()
    for i, category in enumerate(CATEGORIES):
        values = [parts[phase].get(category, 0) for phase in parts]
        if any(values):
            fig.add_trace(go.Bar(x=list(parts), y=[v / 2 ** 20 for v in values], name=category.replace("_", " "),
                                 marker_color=palette(i), customdata=[fmt_bytes(v) for v in values],
                                 hovertemplate=f"{category}: %{{customdata}}<extra>%{{x}}</extra>"))
    fig.add_hline(y=mem.capacity_bytes / 2 ** 20, line_dash="dash", line_color="#d62728",
                  annotation_text=f"{mem.target} HBM per core {fmt_bytes(mem.capacity_bytes)}")
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="MiB")
    fig.update_xaxes(title=f"phase of a step at batch {mem.batch_size}")
    return base_layout(fig, f"HBM at batch {mem.batch_size}: {'fits' if mem.fits else 'does NOT fit'}; "
                            f"largest batch that fits ≈ {mem.max_batch_size} (estimate)", height=420)


def report_figures(report) -> dict:
    return {"performance": performance_figure(report),
            "price-performance": price_performance_figure(report.performance.rename(columns={"step_time_s": "time_s"}),
                                                  title="Time, MFU and cost per step"),
            "time breakdown": breakdown_figure(report),
            "op coverage": coverage_figure(report), "numerics": numerics_figure(report),
            "memory": memory_figure(report)}


# -- text ---------------------------------------------------------------------------------
def findings(report) -> list[str]:
    """The headline of ``report``: one line per question, the answer first; dollars lead."""
    priced = price_line(report)
    out = [priced] if priced else []
    cov, fb = report.coverage, report.fallbacks
    compute = cov[cov["status"].isin(("lowered", "host fallback"))]
    if len(fb):
        share = fb["percent_of_step"].sum()
        out.append(f"op coverage: {len(fb)} of {len(compute)} op types fall back to the host "
                   f"({', '.join(fb['op'])}): {fmt_time_s(fb['time_ns'].sum() * 1e-9)}, "
                   f"{share:.1f} % of the {report.target} step")
    else:
        out.append(f"op coverage: all {len(compute)} op types lower on the NeuronCore")
    custom = report.custom_code
    if custom is not None and len(custom):
        parts = [f"{r.name} ({r.kind}" + (f", {r.gpu_step_percent:.1f} % of the {report.baseline} step)"
                                          if pd.notna(r.gpu_step_percent) else ")") for r in custom.itertuples()]
        out.append(f"custom code: {len(custom)} blocker(s) until ported to NKI: {'; '.join(parts)}")
    num = report.numerics
    if num.skipped:
        out.append(f"numerics: {num.skipped}")
    elif num.flagged:
        origins = num.drift_origins or num.flagged
        out.append(f"numerics: {len(num.flagged)} layer(s) drift past {num.threshold:g}, starting at "
                   f"{', '.join(origins[:4])}{', ...' if len(origins) > 4 else ''}; "
                   f"model output drift {num.output_rel_error:.3g}")
    else:
        out.append(f"numerics: no layer drifts past {num.threshold:g} (worst {num.max_rel_error:.3g} max, "
                   f"model output {num.output_rel_error:.3g} mean)")
    comp = report.compile
    line = f"compile: {comp.graph_break_count} graph break(s), {len(comp.recompiles)} recompile(s)"
    if len(comp.breaks):
        first = comp.breaks.iloc[0]
        line += f"; first: {first['reason']} at {first['source'] or 'unknown line'}"
    if comp.compiled_error:
        line += f"; no compiled step ({comp.compiled_error})"
    out.append(line)
    neuron, gpu = report.step("target"), report.step("baseline")
    if neuron is not None and gpu is not None:
        out.append(f"performance: eager step {fmt_time_s(neuron.step_time_s)} on {report.target} vs "
                   f"{fmt_time_s(gpu.step_time_s)} on {report.baseline} "
                   f"({neuron.step_time_s / gpu.step_time_s:.2f}x), MFU {neuron.mfu_percent:.1f} % vs "
                   f"{gpu.mfu_percent:.1f} %")
    compiled = report.step("target", "compiled")
    if compiled is not None:
        out.append(f"performance: compiled step {fmt_time_s(compiled.step_time_s)} on {report.target}")
    mem = report.memory
    verdict = "fits" if mem.fits else "does NOT fit"
    out.append(f"memory: batch {mem.batch_size} needs ~{fmt_bytes(mem.peak_bytes)} of "
               f"{fmt_bytes(mem.capacity_bytes)} HBM per core: {verdict}; largest batch that fits "
               f"≈ {mem.max_batch_size} (estimate)")
    return out + timing_notes(report)


# -- HTML sections ------------------------------------------------------------------------
def _frame_html(frame: pd.DataFrame, formats: dict | None = None, max_rows: int = 60) -> str:
    if not len(frame):
        return "<p class='note'>(none)</p>"
    shown = frame.head(max_rows).copy()
    for col, fn in (formats or {}).items():
        if col in shown:
            shown[col] = shown[col].map(fn)
    more = f"<p class='note'>{len(frame) - max_rows} more rows in to_frames()</p>" if len(frame) > max_rows else ""
    return shown.to_html(classes="wb", index=False, border=0, float_format=lambda v: f"{v:.4g}") + more


def _ns(v) -> str:
    return fmt_time_s(float(v) * 1e-9)


def sections(report) -> dict:
    """Section title -> HTML body, in reading order."""
    headline = "".join(f"<li>{html.escape(f)}</li>" for f in findings(report))
    mem, num, comp = report.memory, report.numerics, report.compile
    compile_status = (f"<p class='note'>No compiled step: {html.escape(comp.compiled_error)}</p>"
                      if comp.compiled_error else "")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in comp.notes)
    return {
        "findings": f"<ul>{headline}</ul>",
        "performance": _frame_html(report.performance, {"step_time_s": fmt_time_s, "hbm_bytes": fmt_bytes,
                                                        "fallback_time_s": fmt_time_s, "usd_per_step": fmt_usd,
                                                        "usd_per_1m_items": fmt_usd}) + compile_status
        + _frame_html(report.time_breakdown, {"time_ns": _ns}),
        "op coverage": _frame_html(report.coverage, {"time_ns": _ns, "host_busy_ns": _ns, "fallback_time_ns": _ns,
                                                     "hbm_bytes": fmt_bytes}),
        "numerics": (f"<p class='note'>{html.escape(num.skipped)}</p>" if num.skipped else
                     f"<p class='note'>{html.escape(num.compared)} against {html.escape(num.reference)}; "
                     f"threshold {num.threshold:g} on the mean relative error.</p>"
                     + _frame_html(num.layers.drop(columns=["order"]))),
        "compile readiness": (f"<p>{comp.graph_count} graph(s), {comp.graph_break_count} graph break(s), "
                              f"{len(comp.recompiles)} recompile(s).</p>" + compile_status
                              + _frame_html(comp.breaks) + _frame_html(comp.recompiles)
                              + (f"<ul>{notes}</ul>" if notes else "")),
        "memory": (f"<p class='note'>{html.escape(mem.note)}</p>"
                   + _frame_html(mem.to_frame(), {"bytes": fmt_bytes})
                   + _frame_html(mem.batches, {"estimated_peak_bytes": fmt_bytes})),
        **chips_sections(report),
    }


def _title(report) -> str:
    mode = "training step" if report.training else "inference"
    return (f"Migration report: {report.model_name} ({mode}, batch {report.batch_size}) "
            f"on {report.target} vs {report.baseline}")


def report_html(report, *, figures: bool = True, standalone: bool = True) -> str:
    """The report as HTML; ``figures`` embeds plotly (inline plotly.js, works offline)."""
    figs = report_figures(report) if figures else {}
    body, first = [f"<h1>{html.escape(_title(report))}</h1>"], True
    for name, content in sections(report).items():
        body.append(f"<h2>{html.escape(name)}</h2>{content}")
        for fig_name in _FIGURES_BY_SECTION.get(name, ()):
            if fig_name in figs:
                body.append(figs[fig_name].to_html(full_html=False, include_plotlyjs=first, default_width="100%",
                                                   config={"displaylogo": False, "responsive": True}))
                first = False
    inner = "".join(body)
    if not standalone:
        return f"<div class='wb-migration'><style>{REPORT_STYLE}</style>{inner}</div>"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(_title(report))}</title>"
            f"<style>{REPORT_STYLE}</style></head><body>{inner}</body></html>")


def widget(report):
    """Tabs (findings, performance, coverage, numerics, compile, memory) with live figures."""
    import ipywidgets as w

    figs = report_figures(report)
    tabs, titles = [], []
    for name, content in sections(report).items():
        children = [w.HTML(f"<style>{REPORT_STYLE}</style>{content}")]
        children += [go.FigureWidget(figs[f]) for f in _FIGURES_BY_SECTION.get(name, ())]
        tabs.append(w.VBox(children))
        titles.append(name)
    tab = w.Tab(children=tabs)
    for i, title in enumerate(titles):
        tab.set_title(i, title)
    return w.VBox([w.HTML(f"<b>{html.escape(_title(report))}</b>"), tab])
