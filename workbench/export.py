"""Chrome/Perfetto trace files: write a Profile, read it back.

Layout of the file (Trace Event Format, JSON object form):
- pid 1 is the simulated device: one thread (tid) per engine and DMA queue, "X" instruction
  events that never partially overlap on a track, and counter ("C") tracks for engine
  utilisation and bytes. They have no ``cat``, so Holistic Trace Analysis (HTA) passes over them;
- pid 2 holds the ops/kernels as "X" spans at full precision, in as many lanes as overlapping ops
  need, each with the ``correlation`` id of its kernel (HTA's launch side);
- pid 0 is the device's kernels as Kineto writes a GPU's, for HTA: one "kernel" per op (views and
  collective waits are no device work) on stream 1 (compute) or 2 (collectives, named
  ``ncclKernel_*`` so HTA counts them as communication), named as torch.profiler names them
  (``backend.device.profiler_timeline.kernel_name``). Their times are on the whole-microsecond
  grid, each boundary moved by at most 0.5 us: HTA rounds finer times itself (start up, end
  down), which turns sub-microsecond kernels inside out and trips its temporal breakdown;
- pid 3 holds joined pipeline steps (a fake world's ``schedule.step()``), one thread per stage;
- steps marked with ``Profile.step()`` are ``ProfilerStep#<n>`` spans (cat ``user_annotation``, as
  Kineto writes torch.profiler's) on pid 2's tid 0, on the same microsecond grid: HTA gives
  every op and kernel the iteration of the step it ran in;
- top-level ``deviceProperties``, ``schemaVersion`` and ``distributedInfo`` (rank, world_size,
  backend; written with a space after each colon, as HTA finds the rank with ``"rank":\s+``)
  so Perfetto and HTA accept it, and a ``workbench`` key with the header, op records, summary
  and compiled graphs so ``load_trace`` re-creates the Profile.

Instruction events beyond ``max_events`` are merged (see ``workbench.aggregate``) so files stay
small; ``full=True`` writes every kept instruction.
"""
from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np

from backend.device.profiler_timeline import NOT_DEVICE_WORK, kernel_name
from backend.sim.overlap import is_collective
from backend.sim.trace import engine_class
from workbench.aggregate import aggregate_events, busy_per_bin
from workbench.presenters import presenter
from workbench.profiles import Profile
from workbench.records import OP_COLUMNS, check_columns, json_safe, trace_from_parts, trace_header
from workbench.trace_folder import check_list_of_mappings, check_mapping, check_times, reading

__all__ = ["export_chrome_trace", "chrome_trace_dict", "load_trace", "DEFAULT_MAX_EVENTS", "FORMAT"]

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS = 20_000
FORMAT = "neuron-workbench-profile"
DEVICE_PID, OPS_PID, KERNELS_PID, PIPELINE_PID = 1, 2, 0, 3
COMPUTE_STREAM, COLLECTIVE_STREAM = 1, 2
# Correlation ids start here: HTA downcasts the column to the smallest integer type that holds
# it, then stores row numbers in it, which a run whose ids fit int8 or int16 overflows.
CORRELATION_BASE = 1 << 30
_COUNTER_BINS = 400


SINGLE_PROCESS = {"rank": 0, "world_size": 1, "backend": "neuron"}


def _us(ns) -> np.ndarray:
    """ns -> us rounded to whole ns, so ends and starts compare exactly after the division."""
    return np.round(np.asarray(ns, dtype=np.float64)) / 1000.0


def _metadata(pid: int, process: str, threads: dict) -> list:
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    for tid, name in threads.items():
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return out


def _flatten(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clip starts so no event begins before an earlier one on the track ends (rows sorted)."""
    prev_end = np.maximum.accumulate(np.concatenate([[-np.inf], end[:-1]]))
    return np.maximum(start, prev_end), end


def _instruction_events(profile, agg, tids: dict, names: np.ndarray) -> list:
    out, clipped = [], 0
    for engine, rows in agg.groupby("engine", sort=False):
        start, end = _flatten(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
        keep = end > start
        clipped += int((~keep).sum() + (start[keep] != rows["start_ns"].to_numpy()[keep]).sum())
        ts, te = _us(start[keep]), _us(end[keep])
        rows = rows[keep]
        cls = engine_class(engine)
        for t0, t1, code, op, last, count, busy, nbytes, flops in zip(
                ts, te, rows["opcode"], rows["op_index"], rows["op_last"], rows["count"], rows["busy_ns"],
                rows["bytes_moved"], rows["flops"]):
            name = code if count == 1 or op != last else str(names[op]) if op < len(names) else code
            args = {"opcode": code, "op_index": int(op), "op": str(names[op]) if op < len(names) else "",
                    "bytes": int(nbytes), "flops": int(flops), "engine_class": cls}
            if count > 1:
                args.update(op_last=int(last), instructions=int(count), busy_ns=float(busy))
            out.append({"ph": "X", "name": name, "pid": DEVICE_PID, "tid": tids[engine],
                        "ts": float(t0), "dur": float(t1 - t0), "args": args})
    if clipped:
        log.warning("clipped %d instruction events that overlapped on their track", clipped)
    return out


def _correlation(op_index) -> int:
    """Correlation id of an op's span and its kernel (HTA reads ids <= 0 as "no link")."""
    return CORRELATION_BASE + int(op_index)


def _kernel_events(ops) -> list:
    """One kernel per op of device work, on the compute or collectives stream, with its times
    on the whole-microsecond grid (rounded: each boundary moves at most 0.5 us, and kernels that
    did not overlap still do not)."""
    out = []
    for rec in ops.sort_values("start_ns", kind="stable").to_dict("records"):
        if rec["kind"] in NOT_DEVICE_WORK:
            continue
        stream = COLLECTIVE_STREAM if is_collective(rec["name"]) else COMPUTE_STREAM
        ts, end = (int(round(float(rec[key]) / 1000.0)) for key in ("start_ns", "end_ns"))
        out.append({"ph": "X", "name": kernel_name(rec["name"], rec["kind"]), "cat": "kernel", "pid": KERNELS_PID,
                    "tid": stream, "ts": ts, "dur": end - ts,
                    "args": {"device": 0, "stream": stream, "correlation": _correlation(rec["op_index"]),
                             "op_index": int(rec["op_index"]), "op": rec["name"],
                             "duration_ns": float(rec["end_ns"]) - float(rec["start_ns"])}})
    return out


def _op_events(ops) -> tuple[list, int]:
    """Ops as X spans; an op that starts before the previous one ends goes to another lane."""
    lanes_end: list = []
    out = []
    for rec in ops.sort_values("start_ns", kind="stable").to_dict("records"):
        start, end = float(rec["start_ns"]), float(rec["end_ns"])
        lane = next((i for i, e in enumerate(lanes_end) if e <= start), len(lanes_end))
        if lane == len(lanes_end):
            lanes_end.append(end)
        lanes_end[lane] = end
        ts, te = _us([start, end])
        args = json_safe({k: rec.get(k) for k in ("op_index", "kind", "input_shapes", "output_shapes", "source",
                                                  "flops", "hbm_bytes", "instruction_count")})
        args["correlation"] = _correlation(rec["op_index"])
        out.append({"ph": "X", "name": rec["name"], "cat": rec["kind"], "pid": OPS_PID, "tid": lane + 1,
                    "ts": float(ts), "dur": float(te - ts), "args": args})
    return out, len(lanes_end)


def _counter_events(profile) -> list:
    """Utilisation per engine class in time bins, HBM traffic so far, and HBM allocated."""
    events, ops = profile.instructions, profile.ops
    out = []
    if len(events):
        t0, t1 = events["start_ns"].min(), events["end_ns"].max()
        edges = np.linspace(t0, t1, _COUNTER_BINS + 1)
        width = max(edges[1] - edges[0], 1e-9)
        classes = events["engine"].map(engine_class)
        tracks = events.groupby(classes)["engine"].nunique()
        busy = {cls: busy_per_bin(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy(), edges)
                / (width * tracks[cls]) * 100.0 for cls, rows in events.groupby(classes)}
        for i, ts in enumerate(_us(edges[:-1])):
            out.append({"ph": "C", "name": "engine utilisation (%)", "pid": DEVICE_PID, "tid": 0, "ts": float(ts),
                        "args": {cls: round(float(v[i]), 3) for cls, v in busy.items()}})
    if len(ops):
        order = ops.sort_values("end_ns", kind="stable")
        step = max(1, len(order) // 2000)
        read, write = np.cumsum(order["hbm_read_bytes"].to_numpy()), np.cumsum(order["hbm_write_bytes"].to_numpy())
        for ts, r, w in list(zip(_us(order["end_ns"]), read, write))[::step]:
            out.append({"ph": "C", "name": "HBM traffic (bytes)", "pid": DEVICE_PID, "tid": 0, "ts": float(ts),
                        "args": {"read": int(r), "write": int(w)}})
    for ts, nbytes in profile.trace.hbm_timeline:
        out.append({"ph": "C", "name": "HBM allocated (bytes)", "pid": DEVICE_PID, "tid": 0,
                    "ts": float(_us(ts)), "args": {"allocated": int(nbytes)}})
    return out


def _columnar(records: list) -> dict:
    """Op records as one column list and row lists: a third of the size of repeated keys."""
    columns = list(records[0]) if records else []
    return {"columns": columns, "rows": [json_safe([rec.get(c) for c in columns]) for rec in records]}


def _records(table: dict) -> list:
    columns = table["columns"]
    return [dict(zip(columns, row)) for row in table["rows"]]


def _distributed_info(profile) -> dict:
    """HTA's ``distributedInfo``: the process group the profile ran in (recorded when it started),
    else the one initialised now, else a world of one."""
    from backend.distributed import distributed_info
    return dict(profile.meta.get("distributed") or distributed_info() or SINGLE_PROCESS)


def _step_events(profile) -> list:
    """``ProfilerStep#<n>`` from the end of the step before (or the start) to the end of step n."""
    ends = [int(round(ns / 1000.0)) for ns in profile.meta.get("step_ends_ns") or ()]
    return [{"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "pid": OPS_PID, "tid": 0,
             "ts": start, "dur": end - start, "args": {}}
            for n, (start, end) in enumerate(zip([0, *ends], ends))]


def _pipeline_events(profile) -> list:
    """Joined pipeline steps: one thread per stage, each action an "X" span where the step began."""
    pipelines = profile.trace.pipelines
    if not pipelines:
        return []
    stages = sorted({e.stage for p in pipelines for e in p.events})
    out = _metadata(PIPELINE_PID, "pipeline stages (joined step, simulated)", {s + 1: f"stage {s}" for s in stages})
    for p in pipelines:
        out += [{"ph": "X", "name": f"{e.kind}{e.microbatch}", "pid": PIPELINE_PID, "tid": e.stage + 1,
                 "ts": (p.start_ns + e.start_ns) / 1000.0, "dur": (e.end_ns - e.start_ns) / 1000.0,
                 "args": {"rank": e.rank, "waited_ns": e.waited_ns, "p2p_exposed_ns": e.p2p_exposed_ns}}
                for e in p.events]
    return out


def chrome_trace_dict(profile, *, max_events: int | None = None, full: bool = False) -> dict:
    """The trace file's content as a dict (see the module docstring)."""
    trace = profile.trace
    engines = list(profile.timeline)
    tids = {engine: i + 1 for i, engine in enumerate(engines)}
    limit = len(profile.instructions) if full else (max_events or DEFAULT_MAX_EVENTS)
    agg, level = aggregate_events(profile.instructions, limit)
    names = profile.ops["name"].to_numpy(dtype=object) if len(profile.ops) else np.array([], dtype=object)
    op_events, lanes = _op_events(profile.ops) if len(profile.ops) else ([], 0)
    device = f"{trace.device_kind} {trace.target} (simulated)"
    kernel_events = _kernel_events(profile.ops) if len(profile.ops) else []
    op_threads = {i + 1: "ops" if i == 0 else f"ops (lane {i + 1})" for i in range(lanes)}
    if profile.meta.get("step_ends_ns"):
        op_threads[0] = "steps"
    events = (_metadata(DEVICE_PID, device, {tid: e for e, tid in tids.items()})
              + _metadata(OPS_PID, "ops and kernels", op_threads)
              + _metadata(KERNELS_PID, f"{device}: kernels per op (whole microseconds, for HTA)",
                          {COMPUTE_STREAM: "stream 1 (compute)", COLLECTIVE_STREAM: "stream 2 (collectives)"})
              + _instruction_events(profile, agg, tids, names) + op_events + kernel_events + _step_events(profile)
              + _counter_events(profile) + _pipeline_events(profile))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "deviceProperties": [{"id": 0, "name": device, "target": trace.target, "device_kind": trace.device_kind,
                              "peak_flops_per_s": trace.peak_flops_per_s,
                              "hbm_bytes_per_s": trace.hbm_bytes_per_s, "engines": engines}],
        "schemaVersion": 1,
        "distributedInfo": _distributed_info(profile),
        "workbench": {
            "format": FORMAT, "version": 1, "trace": trace_header(trace),
            "ops": _columnar(trace.to_records()), "summary": json_safe(profile.summary),
            "graphs": [g.to_dict() for g in profile.graphs], "meta": json_safe(profile.meta),
            "events": {"level": level, "written": int(len(agg)), "kept": int(len(profile.instructions))},
        },
    }


@presenter("profile.export_chrome_trace")
def export_chrome_trace(profile, path, *, max_events: int | None = None, full: bool = False) -> Path:
    """Write ``profile`` as a Chrome/Perfetto trace (gzip when ``path`` ends in .gz)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dumps(chrome_trace_dict(profile, max_events=max_events, full=full))
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    log.info("wrote %s (%d bytes)", path, path.stat().st_size)
    return path


def _dumps(data: dict) -> str:
    """Compact JSON, except ``distributedInfo``: HTA finds a file's rank with the pattern
    ``"rank":\s+(\d+)``, so it is written as Kineto writes it, with a space after each colon."""
    parts = [f"{json.dumps(key)}:{json.dumps(value) if key == 'distributedInfo' else json.dumps(value, separators=(',', ':'))}"
             for key, value in data.items()]
    return "{" + ",".join(parts) + "}"


def _read_json(path: Path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: corrupt gzip trace file ({exc})") from exc
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON, so not a readable trace (corrupt or truncated?): {exc}") from exc
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a trace (damaged file)") from None


@presenter("profile.load")
def load_trace(path):
    """A Profile from a file written by ``export_chrome_trace`` or a ``to_csv``/``to_parquet`` folder."""
    path = Path(path)
    if path.is_dir():
        from workbench.tables import load_tables
        return load_tables(path)
    if not path.exists():
        raise FileNotFoundError(path)
    data = _read_json(path)
    if not isinstance(data, (dict, list)) or (isinstance(data, dict) and "traceEvents" not in data):
        raise ValueError(f"{path}: not a Chrome trace (no 'traceEvents')")
    wb = data.get("workbench") if isinstance(data, dict) else None
    if not isinstance(wb, dict) or wb.get("format") != FORMAT:
        raise ValueError(f"{path}: a Chrome trace, but not one written by the workbench (no 'workbench' "
                         "section with its op records); open it in Perfetto (ui.perfetto.dev) instead")
    with reading(path, "workbench trace"):
        header = check_mapping(path, "workbench.trace", wb.get("trace"), optional=False)
        graphs = check_list_of_mappings(path, "workbench.graphs", wb.get("graphs"))
        meta = dict(check_mapping(path, "workbench.meta", wb.get("meta")))
        meta["events_level"] = check_mapping(path, "workbench.events", wb.get("events")).get("level", "instruction")
        tid_engine = {ev["tid"]: ev["args"]["name"] for ev in data["traceEvents"]
                      if ev.get("ph") == "M" and ev.get("name") == "thread_name" and ev.get("pid") == DEVICE_PID}
        rows = [(ev["ts"] * 1000.0, (ev["ts"] + ev["dur"]) * 1000.0, tid_engine[ev["tid"]], ev["args"]["opcode"],
                 ev["args"]["op_index"], ev["args"].get("bytes", 0), ev["args"].get("flops", 0))
                for ev in data["traceEvents"] if ev.get("ph") == "X" and ev.get("pid") == DEVICE_PID]
        check_columns(wb["ops"]["columns"], OP_COLUMNS, f"{path} (workbench.ops)")
        trace = trace_from_parts(header, _records(wb["ops"]), rows)
        check_times(path, trace)
        return Profile([trace], graphs, meta=meta)
