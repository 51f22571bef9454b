"""The committed fidelity table (docs/fidelity.md, docs/fidelity.json) is what `make fidelity` computes.

A prediction that moves by more than RATIO_TOLERANCE without the committed files moving with it
fails here: regenerate them with `make fidelity` and say in the commit why the ratio moved.
The recomputation takes about 8 minutes on 2 cores: it is a sweep, run by `make fidelity-check`
(and by CI after `make test`), not by `make test`.
"""
from __future__ import annotations

import logging

import pytest

from benchmarks.fidelity.report import DOCS, RATIO_TOLERANCE, rows_from_json, rows_to_markdown

COMMITTED = DOCS / "fidelity.json"


def _committed():
    return rows_from_json(COMMITTED.read_text())


def test_markdown_is_generated_from_the_committed_json():
    assert (DOCS / "fidelity.md").read_text() == rows_to_markdown(_committed()), \
        "docs/fidelity.md was edited by hand or is stale: run `make fidelity`"


def _moved(new, old) -> bool:
    if (new is None) != (old is None):
        return True
    return new is not None and abs(new - old) > RATIO_TOLERANCE * abs(old)


@pytest.mark.sweep
def test_recomputed_table_matches_the_committed_one():
    from benchmarks.fidelity.table import all_rows

    logging.getLogger().setLevel(logging.ERROR)
    committed = {r.workload: r for r in _committed()}
    fresh = {r.workload: r for r in all_rows()}
    assert sorted(fresh) == sorted(committed), "rows were added or removed: run `make fidelity`"
    moved = [f"{name}: {committed[name].predicted_ns} -> {row.predicted_ns} ns (published {row.published_ns})"
             for name, row in fresh.items()
             if _moved(row.predicted_ns, committed[name].predicted_ns)
             or _moved(row.predicted_high_ns, committed[name].predicted_high_ns)
             or row.published_ns != committed[name].published_ns]
    assert not moved, "fidelity ratios moved; run `make fidelity` and commit docs/fidelity.*:\n" + "\n".join(moved)


def test_help_prints_usage_without_running_or_writing_the_table():
    import subprocess
    import sys

    before = COMMITTED.stat().st_mtime_ns
    done = subprocess.run([sys.executable, "-m", "benchmarks.fidelity", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "usage: python -m benchmarks.fidelity" in done.stdout
    assert COMMITTED.stat().st_mtime_ns == before
