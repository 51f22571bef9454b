"""Damaged saved profiles (a Chrome trace file, a CSV or Parquet table folder) raise one clear
"damaged" ValueError, whatever the damage; none loads silently with impossible times, and a
folder's ``format`` can name no file outside the folder."""
from __future__ import annotations

import json
import os

import pytest
import torch

import workbench as wb
from workbench.export import load_trace
from workbench.tables import load_tables
from workbench.trace_folder import DamagedProfileError

DEEP = "[" * 100_000 + "]" * 100_000            # past the JSON parser's recursion limit


@pytest.fixture(scope="module")
def prof():
    with wb.profile(device="neuron", target="trn2") as p:
        a = torch.ones(64, 64, device="neuron")
        (a @ a).relu().sum()
    return p


def _first_kernel(data) -> dict:
    return next(ev for ev in data["traceEvents"] if ev.get("ph") == "X" and ev.get("pid") == 1)


def _set_op_time(data, column, value):
    ops = data["workbench"]["ops"]
    ops["rows"][0][ops["columns"].index(column)] = value


# damage -> how it is done to the trace file's JSON (or, for a str, the whole text)
TRACE_DAMAGE = {
    "header is a list": lambda d: d["workbench"].update(trace=[]),
    "events is a string": lambda d: d["workbench"].update(events="x"),
    "graphs are numbers": lambda d: d["workbench"].update(graphs=[1, 2]),
    "meta is a list": lambda d: d["workbench"].update(meta=[1]),
    "ops is a string": lambda d: d["workbench"].update(ops="x"),
    "event ts is a string": lambda d: _first_kernel(d).update(ts="x"),
    "infinite duration": lambda d: _first_kernel(d).update(dur=float("inf")),
    "negative duration": lambda d: _first_kernel(d).update(dur=-5.0),
    "nan start": lambda d: _first_kernel(d).update(ts=float("nan")),
    "op ends before it starts": lambda d: _set_op_time(d, "end_ns", -1.0),
    "op starts at infinity": lambda d: _set_op_time(d, "start_ns", float("inf")),
    "100k-deep JSON": DEEP,
}


@pytest.mark.parametrize("damage", TRACE_DAMAGE.values(), ids=TRACE_DAMAGE.keys())
def test_a_damaged_trace_file_is_a_clear_error(prof, tmp_path, damage):
    path = prof.export_chrome_trace(tmp_path / "t.json")
    if isinstance(damage, str):
        path.write_text(damage)
    else:
        data = json.loads(path.read_text())
        damage(data)
        path.write_text(json.dumps(data))           # inf and nan as JSON's Infinity / NaN
    with pytest.raises(ValueError, match="damaged") as error:
        load_trace(path)
    assert str(path) in str(error.value)


def _csv_times(folder, table, column, value):
    import pandas as pd
    frame = pd.read_csv(folder / f"{table}.csv")
    frame.loc[0, column] = value
    frame.to_csv(folder / f"{table}.csv", index=False)


def _meta(folder, **changes):
    path = folder / "profile.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


FOLDER_DAMAGE = {
    "profile.json is a list": ("csv", lambda f: (f / "profile.json").write_text("[1, 2]")),
    "header is a list": ("csv", lambda f: _meta(f, trace=[])),
    "graphs are numbers": ("csv", lambda f: _meta(f, graphs=[1, 2])),
    "meta is a string": ("csv", lambda f: _meta(f, meta="x")),
    "100k-deep profile.json": ("csv", lambda f: (f / "profile.json").write_text(DEEP)),
    "random-bytes parquet": ("parquet", lambda f: (f / "ops.parquet").write_bytes(os.urandom(4096))),
    "infinite instruction end": ("csv", lambda f: _csv_times(f, "instructions", "end_ns", float("inf"))),
    "negative instruction duration": ("csv", lambda f: _csv_times(f, "instructions", "end_ns", -10.0)),
    "op ends before it starts": ("csv", lambda f: _csv_times(f, "ops", "end_ns", -1.0)),
    "unknown format": ("csv", lambda f: _meta(f, format="xlsx")),
}


@pytest.mark.parametrize("fmt,damage", FOLDER_DAMAGE.values(), ids=FOLDER_DAMAGE.keys())
def test_a_damaged_table_folder_is_a_clear_error(prof, tmp_path, fmt, damage):
    folder = prof.to_csv(tmp_path / "t") if fmt == "csv" else prof.to_parquet(tmp_path / "t")
    damage(folder)
    with pytest.raises(DamagedProfileError, match="damaged|unknown table format"):
        load_tables(folder)


def test_the_format_field_cannot_reach_outside_the_folder(prof, tmp_path):
    elsewhere = prof.to_parquet(tmp_path / "elsewhere")            # a valid folder somewhere else
    folder = prof.to_csv(tmp_path / "x" / "folder")
    for table in ("ops", "instructions"):      # so "ops.x/../../../elsewhere/..." resolves on disk
        (folder / f"{table}.x").mkdir()
    _meta(folder, format="x/../../../elsewhere/ops.parquet")
    with pytest.raises(DamagedProfileError, match="unknown table format"):
        wb.load_trace(folder)
    assert wb.load_trace(elsewhere).summary == prof.summary          # the stock formats still load


def test_undamaged_files_load(prof, tmp_path):
    assert load_trace(prof.export_chrome_trace(tmp_path / "t.json")).summary == prof.summary
    assert load_tables(prof.to_csv(tmp_path / "c")).summary == prof.summary
    assert load_tables(prof.to_parquet(tmp_path / "p")).summary == prof.summary
