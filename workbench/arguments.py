"""Argument types for numbers on command lines and magic lines: argparse reports a bad one as
"argument --x: ..." (the CLI exits with its usage, a magic raises UsageError), before anything runs."""
from __future__ import annotations

import argparse

from backend.sim.checks import positive

__all__ = ["positive_float"]


def positive_float(text: str) -> float:
    """A finite number > 0 (``nan``, ``inf``, ``0`` and negatives are refused)."""
    try:
        return positive("value", float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}") from None
