"""``Profile``: what one profiled run produced, as tables, counters, figures and files.

A Profile wraps one or more simulator Traces (several when a run was recorded in pieces) and
the compiled graphs seen during the run. Tables are pandas DataFrames built from the Trace's
records; figures, the dashboard and the exporters all read from the same Profile. This module
holds the data only: ``show()``, ``save_html()``, the exports and ``load()`` call presenters
(``workbench.presenters``) that the modules drawing and writing profiles register, so none of
those modules is imported from here.
"""
from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path

import pandas as pd

from backend.sim.trace import OpSummary, Trace, merge_traces
from workbench.graphs import expand_graphs
from workbench.html_parts import summary_html
from workbench.presenters import present

__all__ = ["Profile", "EVENT_COLUMNS", "TIMING_ONLY_VALUES"]

log = logging.getLogger(__name__)

EVENT_COLUMNS = ("start_ns", "end_ns", "duration_ns", "engine", "opcode", "op_index",
                 "bytes_moved", "flops")
_MEMORY_LEVELS = ("hbm", "sbuf", "psum")
# What the summary says about the last joined pipeline step, as ``pipeline_<key>``.
_PIPELINE_SUMMARY = ("step_time", "bubble_fraction", "schedule_bubble_fraction", "p2p_exposed_time", "stages",
                     "microbatches", "stages_measured")
# What a timing-only run's summary says about tensor values (none were computed).
TIMING_ONLY_VALUES = "none (timing-only: shapes, no values)"


def _timing_only_values(kept: dict | None) -> str:
    """The summary's ``values`` line: none, or the small tensors that kept theirs (exact)."""
    if not kept or not kept["tensors"]:
        return TIMING_ONLY_VALUES
    return (f"{TIMING_ONLY_VALUES[:-1]} except {kept['tensors']} small tensors ({kept['bytes']:,} bytes) "
            f"and {kept['ops']} ops on them, computed exactly on the host)")


class Profile:
    """Tables, counters and views of one profiled run.

    ``meta`` carries how the run was made (device, target, compiled, wall_time_s, ...);
    ``result`` holds what the profiled callable returned, when there was one; ``workload`` what
    the simulator was fed and ``replay`` (``config -> ns``) runs it again on another config
    (both set by ``profile()`` and the migration report), which :meth:`time_band` uses.
    """

    _recording = False          # True while its ``with profile()`` block runs

    def __init__(self, traces=(), graphs=(), *, meta: dict | None = None):
        self.meta: dict = dict(meta or {})
        self.result = None
        self.workload: list | None = None
        self.workload_target = None          # the config (NeuronCore, GPU, TPU) the workload ran on
        self.replay = None                   # config -> simulated ns of the workload there
        self.band = None
        self._step_clock = None              # the simulated clock, while profile() records into it
        self._attach(traces, graphs)

    def _set_recording(self, recording: bool) -> None:
        """Mark the profile as filling in (a ``with profile()`` block is running) or done."""
        self._recording = recording

    def _require_results(self) -> None:
        if self._recording:
            raise RuntimeError("profile results are available after the `with` block ends: this profile is "
                               "still recording")

    @classmethod
    def coerce(cls, obj) -> "Profile":
        """A Profile from a Profile, a Trace or a list of Traces."""
        return obj if isinstance(obj, cls) else cls(obj)

    def _attach(self, traces, graphs=()) -> None:
        """(Re)fill the profile; used when a ``with profile()`` block ends."""
        self._recording = False
        self.traces = [traces] if isinstance(traces, Trace) else list(traces)
        self.graphs = expand_graphs(graphs)
        for name in ("trace", "ops", "instructions", "fallbacks", "timeline", "memory"):
            self.__dict__.pop(name, None)
        self.band = None

    # -- data ------------------------------------------------------------------------------
    @cached_property
    def trace(self) -> Trace:
        self._require_results()
        if not self.traces:
            return Trace(target=str(self.meta.get("target", "")),
                         device_kind=str(self.meta.get("device_kind", "neuron")))
        return merge_traces(self.traces)

    @property
    def summary(self) -> dict:
        self._require_results()
        out = self.trace.summary()
        out["graph_count"] = len(self.graphs)
        out["graph_break_count"] = sum(len(g.graph_breaks) for g in self.graphs)
        if "wall_time_s" in self.meta:
            out["host_wall_time"] = float(self.meta["wall_time_s"])
        if self.meta.get("timing_only"):
            out["values"] = _timing_only_values(self.meta.get("timing_only_values"))
        if self.trace.pipelines:
            last = self.trace.pipelines[-1].summary()
            out.update({"pipeline_steps": len(self.trace.pipelines), "pipeline_schedule": self.trace.pipelines[-1].schedule,
                        **{f"pipeline_{key}": last[key] for key in _PIPELINE_SUMMARY}})
        if self.band is not None:
            out["total_time_low"], out["total_time_high"] = self.band.low_ns * 1e-9, self.band.high_ns * 1e-9
            widest = self.band.dominant(1)
            if widest:
                out["band_dominant"] = widest[0].knob.name
        return out

    @property
    def pipeline(self):
        """The last pipeline step of the run as a ``workbench.pipeline.PipelineStep`` (every
        stage's lane, its summary and figure), or None: a fake world's ``schedule.step()`` joins
        its stages while a profile records. All of them: ``trace.pipelines``."""
        self._require_results()
        if not self.trace.pipelines:
            return None
        from workbench.pipeline_steps import PipelineStep
        return PipelineStep(self.trace.pipelines[-1])

    def step(self) -> None:
        """Mark the end of a training step, as torch.profiler's ``prof.step()`` does, inside the
        ``with wb.profile() as prof:`` block. The step ends when the simulated device has run what
        was issued so far; the Chrome trace export writes each step as a ``ProfilerStep#<n>`` span
        (n from 0), which Holistic Trace Analysis's per-iteration analyses read."""
        if self._step_clock is None:
            raise RuntimeError("Profile.step() marks steps while the profile records: call it inside its "
                               "'with wb.profile() as prof:' block")
        self.meta.setdefault("step_ends_ns", []).append(float(self._step_clock()))

    def time_band(self):
        """The simulated time with its error band (``backend.sim.sensitivity.TimeBand``): the run
        replayed with every modelling assumption of its target (NeuronCore, GPU or TPU) at its
        plausible range ends. Costs about two replays per assumption, so it runs on request;
        afterwards ``summary`` carries ``total_time_low`` / ``total_time_high``."""
        self._require_results()
        if self.replay is None:
            raise RuntimeError("time_band() needs a profile made by profile() or migration_report(); this one "
                               "kept no workload to replay")
        from backend.sim.sensitivity import time_band
        self.band = time_band(self.replay, self.workload_target or self.meta.get("target"))
        return self.band

    @cached_property
    def ops(self) -> pd.DataFrame:
        """One row per op or kernel in run order, leading with what a reader looks for first:
        ``name``, ``kind``, ``time_ns`` and ``share`` (of the ops' summed time), then the rest."""
        records = self.trace.to_records()
        if not records:     # keep the columns so filters and figures work on an empty run
            frame = pd.DataFrame(columns=list(OpSummary(0, "", "op").to_record()))
        else:
            frame = pd.DataFrame.from_records(records)
        total = frame["time_ns"].sum() if len(frame) else 0.0
        frame["share"] = frame["time_ns"] / total if total else 0.0
        lead = ["name", "kind", "time_ns", "share"]
        return frame[lead + [c for c in frame.columns if c not in lead]]

    def top(self, n: int = 10, by: str = "name") -> pd.DataFrame:
        """The ``n`` op names (or any ``ops`` column given as ``by``) that took the most simulated
        time: ``count``, ``time_ns``, ``share`` of the ops' time, HBM bytes and FLOPs."""
        if by not in self.ops.columns:
            raise ValueError(f"top(by={by!r}): not a column of ops; choose one of {', '.join(self.ops.columns)}")
        if n < 1:
            raise ValueError(f"top(n={n}): n must be a positive number of rows")
        grouped = self.ops.groupby(by, sort=False).agg(count=("time_ns", "size"), time_ns=("time_ns", "sum"),
                                                     share=("share", "sum"), hbm_bytes=("hbm_bytes", "sum"),
                                                     flops=("flops", "sum"))
        return grouped.sort_values("time_ns", ascending=False).head(n)

    @cached_property
    def instructions(self) -> pd.DataFrame:
        """One row per kept instruction event (columns of ``Trace.event_records``)."""
        ev = self.trace.events
        start = [e.start_ns for e in ev]
        end = [e.end_ns for e in ev]
        frame = pd.DataFrame({
            "start_ns": pd.Series(start, dtype="float64"),
            "end_ns": pd.Series(end, dtype="float64"),
            "engine": pd.Series([e.engine for e in ev], dtype="object"),
            "opcode": pd.Series([e.opcode for e in ev], dtype="object"),
            "op_index": pd.Series([e.op_index for e in ev], dtype="int64"),
            "bytes_moved": pd.Series([e.bytes_moved for e in ev], dtype="int64"),
            "flops": pd.Series([e.flops for e in ev], dtype="int64"),
        })
        frame.insert(2, "duration_ns", frame["end_ns"] - frame["start_ns"])
        return frame

    @cached_property
    def timeline(self) -> dict:
        """Engine track -> its instruction rows, tracks in the target's display order."""
        frame = self.instructions
        groups = dict(tuple(frame.groupby("engine", sort=False))) if len(frame) else {}
        order = [e for e in self.trace.engines if e in groups] + sorted(set(groups) - set(self.trace.engines))
        return {engine: groups[engine].reset_index(drop=True) for engine in order}

    @cached_property
    def memory(self) -> dict:
        """Whole-run traffic per level, peak HBM allocation and the allocation timeline."""
        ops = self.ops
        out = {}
        for level in _MEMORY_LEVELS:
            for way in ("read", "write"):
                col = f"{level}_{way}_bytes"
                out[col] = int(ops[col].sum()) if col in ops else 0
        timeline = pd.DataFrame(self.trace.hbm_timeline, columns=["time_ns", "allocated_bytes"])
        out["hbm_peak_allocated_bytes"] = int(timeline["allocated_bytes"].max()) if len(timeline) else 0
        out["hbm_timeline"] = timeline
        return out

    @cached_property
    def fallbacks(self) -> pd.DataFrame:
        """Ops that ran on the host: count and cost per op name, costliest first."""
        ops = self.ops
        cols = ["name", "count", "time_ns", "host_busy_ns", "hbm_bytes", "sources"]
        if not len(ops):
            return pd.DataFrame(columns=cols)
        fb = ops[ops["kind"] == "fallback"]
        if not len(fb):
            return pd.DataFrame(columns=cols)
        host = fb["host_busy_ns"] if "host_busy_ns" in fb else 0.0
        fb = fb.assign(host_busy_ns=host, source=fb["source"].fillna(""))
        table = fb.groupby("name", sort=False).agg(
            count=("op_index", "size"), time_ns=("time_ns", "sum"), host_busy_ns=("host_busy_ns", "sum"),
            hbm_bytes=("hbm_bytes", "sum"),
            sources=("source", lambda s: ", ".join(sorted({x for x in s if x}))))
        return table.reset_index().sort_values("time_ns", ascending=False, ignore_index=True)

    # -- views and files: drawn and written by the modules that provide each presenter -----
    def figures(self) -> dict:
        """Every figure of the dashboard, by name (graph views one per compiled graph)."""
        return present("profile.figures", self)

    def _repr_html_(self) -> str:
        if self._recording:
            return f"<p>{self!r}</p>"
        return summary_html(self.summary, caption=f"Profile: {self.trace.device_kind} {self.trace.target}")

    def __repr__(self) -> str:
        if self._recording:
            return f"Profile({self.meta.get('device_kind', '')} {self.meta.get('target', '')}: recording, results " \
                   "after the `with` block ends)"
        s = self.summary
        return (f"Profile({s['device_kind']} {s['target']}: {s['op_count']} ops, "
                f"{s['total_time'] * 1e6:.1f} us simulated, {len(self.graphs)} graphs"
                f"{', timing-only' if 'values' in s else ''})")

    def show(self):
        """Display the dashboard (Jupyter) and return it."""
        return present("profile.show", self)

    def save_html(self, path) -> Path:
        """Write a standalone HTML report (plotly.js inline: opens offline)."""
        return present("profile.save_html", self, path)

    def export_chrome_trace(self, path, *, max_events: int | None = None, full: bool = False) -> Path:
        return present("profile.export_chrome_trace", self, path, max_events=max_events, full=full)

    def to_csv(self, directory) -> Path:
        return present("profile.write_tables", self, directory, fmt="csv")

    def to_parquet(self, directory) -> Path:
        return present("profile.write_tables", self, directory, fmt="parquet")

    @classmethod
    def load(cls, path) -> "Profile":
        """Read a Chrome trace written by ``export_chrome_trace`` or a ``to_csv``/``to_parquet`` folder."""
        return present("profile.load", path)
