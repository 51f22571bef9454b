"""Fixtures: synthetic traces shaped like a small transformer block (see wb_synth.py)."""
from __future__ import annotations

import pytest

from wb_synth import transformer_trace

__all__ = []


@pytest.fixture
def small_trace():
    return transformer_trace(layers=2)


@pytest.fixture(scope="session")
def big_trace():
    """GPT-2-small step scale: ~5k ops and ~300k instruction events."""
    return transformer_trace(layers=357, seq=512, d_model=768, max_events=400_000)
