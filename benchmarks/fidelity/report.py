"""The fidelity table as committed evidence: ``docs/fidelity.md`` for readers, ``docs/fidelity.json``
for the regression test that recomputes it (``tests/fidelity/test_fidelity_table.py``)."""
from __future__ import annotations

import json
from pathlib import Path

from backend.sim.sensitivity import TimeBand
from benchmarks.fidelity.table import Row

__all__ = ["DOCS", "rows_to_json", "rows_from_json", "rows_to_markdown", "write_report", "RATIO_TOLERANCE", "IN_RANGE"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
# How far a recomputed prediction may move before the committed table must move with it. The
# simulator is deterministic, so anything above float noise is a real change.
RATIO_TOLERANCE = 0.005
IN_RANGE = (0.8, 1.25)       # the project's stated aim for predicted / published


def _row_record(row: Row) -> dict:
    return {"workload": row.workload, "predicted_ns": row.predicted_ns, "predicted_high_ns": row.predicted_high_ns,
            "published_ns": row.published_ns,
            "band_low_ns": row.band.low_ns if row.band else None,
            "band_high_ns": row.band.high_ns if row.band else None, "note": row.note}


def rows_to_json(rows: list[Row]) -> str:
    return json.dumps({"ratio_tolerance": RATIO_TOLERANCE, "rows": [_row_record(r) for r in rows]}, indent=1) + "\n"


def rows_from_json(text: str) -> list[Row]:
    """The rows a committed ``fidelity.json`` holds (bands keep their ends, not their effects)."""
    rows = []
    for r in json.loads(text)["rows"]:
        band = None if r["band_low_ns"] is None else TimeBand(r["predicted_ns"], r["band_low_ns"], r["band_high_ns"])
        rows.append(Row(r["workload"], r["predicted_ns"], r["published_ns"], band, r["note"], r["predicted_high_ns"]))
    return rows


def _inside(row: Row) -> bool:
    """A row counts as in range when its ratio, or any part of its bracket, lies in IN_RANGE."""
    if row.predicted_ns is None or not row.published_ns:
        return False
    low = row.predicted_ns / row.published_ns
    high = (row.predicted_high_ns or row.predicted_ns) / row.published_ns
    return low <= IN_RANGE[1] and high >= IN_RANGE[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows_to_markdown(rows: list[Row]) -> str:
    ran = [r for r in rows if r.predicted_ns is not None and r.published_ns]
    inside = sum(_inside(r) for r in ran)
    lines = ["# Fidelity: predicted / published", "",
             "Written by `make fidelity` (`python -m benchmarks.fidelity`); do not edit by hand. Each row runs a "
             "published result from `shared/hardware.md` through the same presets, lowering and scheduler as "
             "every other workload; the band is the range the ASSUMPTION constants span "
             "(`backend/sim/sensitivity.py`). How the model gets there: [fidelity-notes.md](fidelity-notes.md).", "",
             f"{inside} of {len(ran)} rows that ran lie within {IN_RANGE[0]}-{IN_RANGE[1]} (a bracket counts when "
             "any part of it does).", "",
             "| workload | predicted | published | ratio | band |", "|---|---|---|---|---|"]
    for r in rows:
        published = r.published_ns and Row(r.workload, r.published_ns, None).predicted
        lines.append(f"| {_cell(r.workload)} | {r.predicted} | {published or '-'} | {r.ratio} | {r.band_text} |")
    lines += ["", "## Notes", ""]
    lines += [f"- **{_cell(r.workload)}**: {_cell(r.note)}" for r in rows if r.note]
    return "\n".join(lines) + "\n"


def write_report(rows: list[Row], docs: Path = DOCS) -> tuple[Path, Path]:
    docs.mkdir(parents=True, exist_ok=True)
    md, js = docs / "fidelity.md", docs / "fidelity.json"
    md.write_text(rows_to_markdown(rows))
    js.write_text(rows_to_json(rows))
    return md, js
