"""Chrome/Perfetto trace, CSV/Parquet and HTML exports: valid, small, and loadable again."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from workbench.export import DEFAULT_MAX_EVENTS, chrome_trace_dict, load_trace
from workbench.profiles import Profile
from wb_graph import attention_graph
from wb_synth import transformer_trace

EPS_US = 1e-6


def validate_chrome_trace(data: dict) -> dict:
    """Assert the structure Perfetto/HTA need; returns {(pid, tid): thread name}."""
    assert isinstance(data["traceEvents"], list)
    assert data["distributedInfo"] == {"rank": 0, "world_size": 1, "backend": "neuron"}
    assert isinstance(data["deviceProperties"], list) and data["deviceProperties"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks: dict = {}
    for ev in data["traceEvents"]:
        assert ev["ph"] in {"X", "C", "M"}
        if ev["ph"] == "X":
            for key in ("ph", "ts", "dur", "pid", "tid", "name"):
                assert key in ev, (key, ev)
            assert ev["dur"] >= 0
            tracks.setdefault((ev["pid"], ev["tid"]), []).append(ev)
        elif ev["ph"] == "C":
            assert {"ts", "pid", "name", "args"} <= set(ev) and ev["args"]
    for key, events in tracks.items():
        assert key in names, f"track {key} has no thread_name"
        stack: list = []
        for ev in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            end = ev["ts"] + ev["dur"]
            while stack and stack[-1] <= ev["ts"] + EPS_US:
                stack.pop()
            assert not stack or end <= stack[-1] + EPS_US, f"partial overlap on {names[key]} at {ev['ts']}"
            stack.append(end)
    return names


def test_chrome_trace_has_a_track_per_engine_and_round_trips(small_trace, tmp_path):
    prof = Profile(small_trace, [attention_graph()], meta={"device": "neuron"})
    path = prof.export_chrome_trace(tmp_path / "t.json")
    data = json.loads(path.read_text())
    names = validate_chrome_trace(data)
    assert sorted(n for (pid, _), n in names.items() if pid == 1) == sorted(prof.timeline)
    assert len({tid for (pid, tid) in names if pid == 1}) == len(prof.timeline)
    counters = {e["name"] for e in data["traceEvents"] if e["ph"] == "C"}
    assert counters == {"engine utilisation (%)", "HBM traffic (bytes)", "HBM allocated (bytes)"}
    assert data["workbench"]["events"]["level"] == "instruction"
    loaded = load_trace(path)
    assert loaded.summary == prof.summary
    assert len(loaded.instructions) == len(prof.instructions)
    assert loaded.graphs[0].to_dict() == prof.graphs[0].to_dict()
    assert loaded.meta["device"] == "neuron"
    assert loaded.fallbacks.equals(prof.fallbacks)


def test_utilisation_counter_matches_engine_busy_time(small_trace):
    data = chrome_trace_dict(Profile(small_trace))
    samples = [e for e in data["traceEvents"] if e["name"] == "engine utilisation (%)"]
    assert all(0 <= v <= 100 + 1e-6 for e in samples for v in e["args"].values())
    width_us = samples[1]["ts"] - samples[0]["ts"]
    tensor_ns = sum(e["args"]["tensor"] for e in samples) / 100 * width_us * 1000
    assert tensor_ns == pytest.approx(sum(op.busy_ns.get("tensor", 0) for op in small_trace.ops), rel=1e-3)


def test_big_traces_are_capped_unless_full_detail_is_asked(tmp_path):
    prof = Profile(transformer_trace(layers=6, seq=512, d_model=768))
    capped = chrome_trace_dict(prof, max_events=500)
    x_device = [e for e in capped["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert len(x_device) <= 500 and capped["workbench"]["events"]["level"] != "instruction"
    assert sum(e["args"].get("instructions", 1) for e in x_device) == len(prof.instructions)
    validate_chrome_trace(capped)
    full = prof.export_chrome_trace(tmp_path / "full.json.gz", full=True)
    data = json.loads(gzip.decompress(full.read_bytes()))
    assert sum(1 for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] == 1) == len(prof.instructions)
    assert load_trace(full).summary == prof.summary
    assert DEFAULT_MAX_EVENTS <= 50_000


def test_corrupt_and_foreign_files_fail_clearly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_trace(bad)
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}))
    with pytest.raises(ValueError, match="not one written by the workbench"):
        load_trace(foreign)
    with pytest.raises(ValueError, match="not a Chrome trace"):
        other = tmp_path / "other.json"
        other.write_text('{"hello": 1}')
        load_trace(other)
    damaged = tmp_path / "damaged.json"
    data = chrome_trace_dict(Profile(transformer_trace(1)))
    del data["workbench"]["ops"]
    damaged.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="damaged"):
        load_trace(damaged)
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.json")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_tables_round_trip(small_trace, tmp_path, fmt):
    prof = Profile(small_trace, [attention_graph()])
    folder = getattr(prof, f"to_{fmt}")(tmp_path / fmt)
    assert {p.name for p in folder.iterdir()} == {f"ops.{fmt}", f"instructions.{fmt}", f"fallbacks.{fmt}",
                                                   "profile.json"}
    loaded = Profile.load(folder)
    assert loaded.summary == prof.summary
    assert [op.source for op in loaded.trace.ops] == [op.source for op in small_trace.ops]
    assert [op.nodes for op in loaded.trace.ops] == [op.nodes for op in small_trace.ops]
    assert loaded.graphs[0].name == "forward_0"
    with pytest.raises(ValueError, match="profile.json"):
        Profile.load(tmp_path)


def test_html_report_embeds_plotly_once_and_no_cdn(small_trace, tmp_path):
    prof = Profile(small_trace, [attention_graph()])
    text = prof.save_html(tmp_path / "r.html").read_text()
    assert len(re.findall(r"Plotly\.newPlot\(", text)) == len(prof.figures()) == 5
    # plotly.js itself mentions a CDN for map data; what matters is that no script is loaded from one.
    assert not re.search(r"<script[^>]*\ssrc=", text)
    assert text.count("plotly.js v") == 1          # the bundle's banner, embedded once
    for title in ("Engine timeline", "Memory traffic", "Roofline", "Compiled graph forward_0", "aten::_unique2"):
        assert title in text
