"""Tables of a Profile as files: CSV or Parquet folders that ``load_trace`` reads back.

A folder holds ``ops``, ``instructions`` and ``fallbacks`` tables plus ``profile.json`` (trace
header, summary, compiled graphs, meta), so it is both spreadsheet-friendly and reloadable.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from workbench.presenters import presenter
from workbench.profiles import EVENT_COLUMNS, Profile
from workbench.records import OP_COLUMNS, check_columns, json_safe, trace_from_parts, trace_header
from workbench.trace_folder import (TABLE_FORMATS, check_format, check_list_of_mappings, check_mapping, check_times,
                                    reading)

__all__ = ["write_tables", "load_tables", "TABLE_FORMATS"]

log = logging.getLogger(__name__)

_META_FILE = "profile.json"
_EVENT_ROW_COLUMNS = [c for c in EVENT_COLUMNS if c != "duration_ns"]   # duration is derived


@presenter("profile.write_tables")
def write_tables(profile, directory, *, fmt: str = "csv") -> Path:
    """Write ops/instructions/fallbacks as ``fmt`` files and profile.json into ``directory``."""
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"fmt must be one of {TABLE_FORMATS}, not {fmt!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ops", "instructions", "fallbacks"):
        frame = getattr(profile, name)
        target = directory / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(target, index=False)
        else:
            frame.to_parquet(target, index=False)
    meta = {"trace": trace_header(profile.trace), "summary": json_safe(profile.summary),
            "graphs": [g.to_dict() for g in profile.graphs], "meta": json_safe(profile.meta), "format": fmt}
    (directory / _META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    log.info("wrote %s tables to %s", fmt, directory)
    return directory


def _read(directory: Path, name: str, fmt: str, required=()) -> pd.DataFrame:
    path = directory / f"{name}.{fmt}"
    if not path.exists():
        raise ValueError(f"{directory}: missing {path.name}; not a complete workbench table folder")
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""]) if fmt == "csv" else pd.read_parquet(path)
    check_columns(list(frame.columns), required, path)
    return frame


def load_tables(directory):
    """A Profile from a folder written by ``write_tables``; a damaged folder raises
    ``DamagedProfileError`` (a ValueError)."""
    directory = Path(directory)
    meta_path = directory / _META_FILE
    if not meta_path.exists():
        raise ValueError(f"{directory}: no {_META_FILE}; not a folder written by Profile.to_csv/to_parquet")
    with reading(directory, "workbench table folder"):
        meta = check_mapping(meta_path, _META_FILE, json.loads(meta_path.read_text(encoding="utf-8")), optional=False)
        fmt = check_format(meta_path, meta.get("format", "csv"))
        header = check_mapping(meta_path, "trace", meta.get("trace"), optional=False)
        graphs = check_list_of_mappings(meta_path, "graphs", meta.get("graphs"))
        run_meta = check_mapping(meta_path, "meta", meta.get("meta"))
        ops = _read(directory, "ops", fmt, OP_COLUMNS)
        events = _read(directory, "instructions", fmt, _EVENT_ROW_COLUMNS)
        rows = events.loc[:, _EVENT_ROW_COLUMNS].itertuples(index=False, name=None)
        trace = trace_from_parts(header, ops.to_dict("records"), rows)
        check_times(directory, trace)
        return Profile([trace], graphs, meta=run_meta)
