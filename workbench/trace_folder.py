"""Reading saved profiles safely: what a damaged trace file or table folder looks like, and the
one error it raises.

A file on disk can hold anything: JSON of the wrong shape (a list where the header belongs, a
string for the events), JSON nested past the parser's recursion limit, bytes that are no
Parquet, times that are infinite or run backwards, or a ``profile.json`` whose ``format`` names
a path outside the folder. :func:`reading` turns every failure of parsing into one
``ValueError`` saying the file is damaged; the ``check_*`` functions refuse parts of the wrong
shape before they are used, and :func:`check_times` refuses a trace whose op or instruction
times are not finite and ordered (which would otherwise load and draw nonsense).
"""
from __future__ import annotations

import contextlib
import math

__all__ = ["DamagedProfileError", "reading", "check_mapping", "check_list_of_mappings", "check_format",
           "check_times", "TABLE_FORMATS"]

TABLE_FORMATS = ("csv", "parquet")


class DamagedProfileError(ValueError):
    """A saved profile (trace file or table folder) that cannot be read back as written."""


def _damaged(where, what: str, detail: str) -> DamagedProfileError:
    return DamagedProfileError(f"{where}: {what} is damaged ({detail})")


@contextlib.contextmanager
def reading(where, what: str):
    """Any failure while parsing ``where`` becomes one :class:`DamagedProfileError`."""
    try:
        yield
    except DamagedProfileError:
        raise
    except RecursionError:
        raise _damaged(where, what, "nested too deeply to be a workbench file") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, OSError) as exc:
        raise _damaged(where, what, f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:        # the Parquet reader's own errors (pyarrow.ArrowInvalid, ...)
        if type(exc).__module__.split(".")[0] in ("pyarrow", "fastparquet"):
            raise _damaged(where, what, f"{type(exc).__name__}: {exc}") from exc
        raise


def check_mapping(where, name: str, value, *, optional: bool = True) -> dict:
    """``value`` if it is a JSON object (``{}`` for a missing optional one)."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise DamagedProfileError(f"{where}: {name} must be a JSON object, got {type(value).__name__}: "
                                  f"{_short(value)}")
    return value


def check_list_of_mappings(where, name: str, value) -> list:
    """``value`` if it is a list of JSON objects (``[]`` when missing)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise DamagedProfileError(f"{where}: {name} must be a list of JSON objects, got {_short(value)}")
    return value


def check_format(where, fmt) -> str:
    """A table folder's ``format``: only the formats the workbench writes. Anything else (a path
    such as ``"x/../../elsewhere/ops.parquet"``) would name files outside the folder."""
    if fmt not in TABLE_FORMATS:
        raise DamagedProfileError(f"{where}: unknown table format {_short(fmt)}; the workbench writes "
                                  f"{' or '.join(TABLE_FORMATS)}")
    return fmt


def check_times(where, trace) -> None:
    """Every op and instruction of ``trace`` starts and ends at finite times, not before 0 and not
    ending before it starts."""
    for kind, rows in (("op", trace.ops), ("instruction", trace.events)):
        for i, row in enumerate(rows):
            start, end = row.start_ns, row.end_ns
            if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end):
                name = getattr(row, "name", None) or getattr(row, "opcode", "")
                raise DamagedProfileError(f"{where}: {kind} {i} ({name}) runs from {start} to {end} ns; "
                                          f"times must be finite, >= 0 and end >= start (damaged file)")


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
