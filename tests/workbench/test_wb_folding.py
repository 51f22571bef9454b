"""Long runs: folded per-op rows keep the right time, and survive export and reload; damaged
table folders fail with the file and the columns that are missing."""
from __future__ import annotations

import json

import pytest

from backend.sim.trace import OpSummary, Trace
from workbench.export import load_trace
from workbench.profiles import Profile


def _trace(max_ops: int) -> Trace:
    """100 ops, 5 ns each, 10 ns apart: a folded row's span is about twice its ops' time."""
    trace = Trace(target="trn2", max_ops=max_ops)
    for i in range(100):
        trace.add_op(OpSummary(op_index=i, name="aten::add" if i % 2 else "aten::mul", kind="op",
                               start_ns=10.0 * i, end_ns=10.0 * i + 5, busy_ns={"vector": 5.0}, flops=7))
    return trace


def _time_by_name(profile: Profile) -> dict:
    return profile.ops.groupby("name")["time_ns"].sum().to_dict()


def test_folded_rows_report_their_ops_time_not_their_span():
    folded, unfolded = Profile(_trace(max_ops=10)), Profile(_trace(max_ops=1000))
    assert folded.summary["ops_folded"] == 90
    assert _time_by_name(folded) == pytest.approx(_time_by_name(unfolded))
    row = folded.ops[folded.ops["count"] > 1].set_index("name").loc["aten::add"]
    assert row["count"] == 45 and row["time_ns"] == pytest.approx(45 * 5.0)
    assert row["end_ns"] - row["start_ns"] > 2 * row["time_ns"]        # the span has the gaps


@pytest.mark.parametrize("write", ["csv", "parquet", "chrome"])
def test_ops_folded_and_folded_times_survive_export_and_reload(tmp_path, write):
    profile = Profile(_trace(max_ops=10))
    if write == "chrome":
        path = profile.export_chrome_trace(tmp_path / "trace.json")
    else:
        path = getattr(profile, f"to_{write}")(tmp_path / "tables")
    loaded = load_trace(path)
    assert loaded.summary["ops_folded"] == 90
    assert loaded.summary["op_count"] == 100
    assert _time_by_name(loaded) == pytest.approx(_time_by_name(profile))


def test_damaged_ops_table_names_file_and_missing_columns(tmp_path):
    folder = Profile(_trace(max_ops=1000)).to_csv(tmp_path / "tables")
    (folder / "ops.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"ops\.csv.*missing column\(s\) op_index, name, kind, start_ns, end_ns"):
        load_trace(folder)


def test_damaged_instructions_table_names_file_and_missing_columns(tmp_path):
    folder = Profile(_trace(max_ops=1000)).to_csv(tmp_path / "tables")
    (folder / "instructions.csv").write_text("start_ns,end_ns\n1,2\n")
    with pytest.raises(ValueError, match=r"instructions\.csv.*missing column\(s\) engine, opcode"):
        load_trace(folder)


def test_damaged_op_records_in_a_chrome_trace_name_missing_columns(tmp_path):
    path = Profile(_trace(max_ops=1000)).export_chrome_trace(tmp_path / "trace.json")
    data = json.loads(path.read_text())
    data["workbench"]["ops"] = {"columns": ["a", "b"], "rows": [[1, 2]]}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"trace\.json.*missing column\(s\) op_index"):
        load_trace(path)
