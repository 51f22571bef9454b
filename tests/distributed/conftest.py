"""Rank processes start with ``spawn`` (fork from a threaded xdist worker can hang)."""
import sys

import pytest


@pytest.fixture(autouse=True)
def _spawnable_main(monkeypatch):
    # xdist's worker runs tests from an exec'd ``__main__`` without ``__spec__``, which
    # multiprocessing's spawn preparation reads; None means "no main module to re-import".
    main = sys.modules["__main__"]
    if not hasattr(main, "__spec__"):
        monkeypatch.setattr(main, "__spec__", None, raising=False)
