"""Showing a figure where the frontend can draw it.

Plotly picks its default renderer when it is imported: in a Jupyter kernel the notebook's, in a
terminal IPython ``"browser"``, which opens a web browser and, where there is none (a server,
ssh), prints "could not locate runnable browser" with a traceback. So a figure goes to plotly's
renderer unless that renderer would open a browser and this machine has none; then one line of
text names the figure and how to keep it (``.write_html(path)``).
"""
from __future__ import annotations

import re
import webbrowser

__all__ = ["display_figure", "renderer_can_draw"]

_BROWSER_RENDERERS = frozenset({"browser", "firefox", "chrome", "chromium"})


def renderer_can_draw() -> bool:
    """Whether plotly's default renderer can show a figure here: it needs no web browser, or this
    machine has one."""
    import plotly.io as pio

    if not _BROWSER_RENDERERS & set(str(pio.renderers.default or "").split("+")):
        return True
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def _title(fig) -> str:
    text = fig.layout.title.text or "figure"
    return re.sub(r"<[^>]+>", " ", text).split("  ")[0].strip()


def display_figure(fig) -> None:
    """``display(fig)`` where the renderer can draw it; else a text line naming it."""
    from IPython.display import display

    if renderer_can_draw():
        display(fig)
    else:
        display({"text/plain": f"[figure: {_title(fig)}; no web browser to draw it here: save it with "
                               f".write_html(path)]"}, raw=True)
