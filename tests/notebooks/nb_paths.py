"""Where the tutorial notebooks are (helper for the notebook tests; not a conftest, so importable)."""
from __future__ import annotations

from pathlib import Path

__all__ = ["NOTEBOOKS", "NOTEBOOK_DIR"]

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
