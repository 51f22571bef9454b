"""Capture what a magic displays (helper for the extension tests; not a conftest, so importable)."""
from __future__ import annotations

from IPython.utils.capture import capture_output

__all__ = ["outputs"]


def outputs(fn, *args):
    """Run ``fn(*args)`` capturing displays; returns (result, the displayed mime bundles)."""
    with capture_output() as captured:
        result = fn(*args)
    return result, [out.data for out in captured.outputs]
