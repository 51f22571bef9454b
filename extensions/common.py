"""What every magic needs: parse a line with its ``magic_arguments`` parser, and show a result.

Bad input raises ``UsageError`` carrying the magic's usage line, so the notebook shows one red
line (no traceback) that says what to type.
"""
from __future__ import annotations

import logging

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.display import display

__all__ = ["parse", "usage_error", "split_list", "show_text", "show_profile", "can_show_widgets"]

log = logging.getLogger(__name__)


def usage_error(magic, message: str) -> UsageError:
    """A UsageError with ``message`` and the usage line of ``magic`` (a magic_arguments function)."""
    usage = magic.parser.format_usage().strip().replace("::", "").strip()
    return UsageError(f"{message}\n{usage}")


def parse(magic, line: str):
    """``magic``'s arguments from ``line``; any parse error becomes a UsageError with the usage."""
    try:
        return magic_arguments.parse_argstring(magic, line)
    except UsageError as exc:
        raise usage_error(magic, str(exc)) from None
    except ValueError as exc:           # unbalanced quotes in the line
        raise usage_error(magic, f"cannot split the line: {exc}") from None


def split_list(magic, value: str | None, allowed=None, what: str = "name") -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; a name outside ``allowed`` is a UsageError."""
    if value is None:
        return []
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise usage_error(magic, f"expected a comma-separated list, got {value!r}")
    unknown = [item for item in items if allowed is not None and item not in allowed]
    if unknown:
        raise usage_error(magic, f"unknown {what} {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return items


def show_text(text: str, html: str) -> None:
    """Display ``html`` in a notebook and ``text`` in a terminal."""
    display({"text/plain": text, "text/html": html}, raw=True)


def can_show_widgets(shell) -> bool:
    """True in a Jupyter kernel (comms for widgets); False in a terminal or plain shell."""
    if getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def show_profile(shell, profile) -> None:
    """The interactive dashboard where widgets work, else the Profile's HTML/text summary."""
    if can_show_widgets(shell):
        profile.show()
    else:
        log.debug("no widget frontend: showing the profile summary")
        display(profile)
