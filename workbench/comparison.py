"""``compare()``: run one callable on several devices (and eager/compiled), side by side.

Simulated devices report simulated device time from their Profile. ``cpu`` has no simulator:
its time is the measured host wall time (median of a few runs), and the table says so.
"""
from __future__ import annotations

import html
import inspect
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from backend.sim import hardware_kinds as kinds
from backend.sim.checks import positive
from backend.sim.tpu import COMPILED_PATH_NOTE as TPU_NOTE
from workbench.format import fmt_bytes, fmt_time_s, fmt_usd
from workbench.devices import HOST_DEVICE, available as devices_available
from workbench.html_parts import html_table
from workbench.pricing import COST_COLUMNS, cost_columns
from workbench.session import (DEFAULT_TARGETS, SIMULATED_DEVICES, compiled_graphs, default_device,
                               ensure_compile_backend, profile)

__all__ = ["compare", "Comparison", "COMPARISON_COLUMNS", "split_device"]

log = logging.getLogger(__name__)

COMPARISON_COLUMNS = ("label", "device", "target", "compiled", "time_s", "time_kind", "hbm_bytes",
                      "mfu_percent", "op_count", "launch_count", "fallback_count", "wall_time_s", *COST_COLUMNS)
_CPU_RUNS = 3


@dataclass
class Comparison:
    """One row per (device, target, mode); ``profiles`` and ``results`` keyed by row label."""

    frame: pd.DataFrame
    profiles: dict = field(default_factory=dict)      # label -> Profile (cpu rows have none)
    results: dict = field(default_factory=dict)      # label -> what fn returned

    def figure(self):
        from workbench.figures import comparison_figure
        return comparison_figure(self.frame)

    def cost_figure(self):
        """Time, MFU and cost per 1M tokens (or steps) of the simulated rows, side by side."""
        from workbench.figures import price_performance_figure
        return price_performance_figure(self.frame)

    def eager_vs_compiled(self, device: str = "neuron"):
        """Engine time, HBM traffic and launches of ``device``'s eager and compiled profiles."""
        from workbench.figures import profiles_figure
        chosen = {label: prof for label, prof in self.profiles.items()
                  if prof is not None and prof.meta.get("device") == device}
        return profiles_figure(chosen, title=f"Eager vs compiled on {device}")

    def show(self):
        """The table and the figures (drawn in Jupyter; named in a terminal)."""
        from IPython.display import display

        from workbench.figures.display import display_figure
        display(self)
        display_figure(self.figure())
        display_figure(self.cost_figure())

    def __repr__(self) -> str:
        runs = ", ".join(f"{r.label}: {r.time_s:.3g} s" for r in self.frame.itertuples())
        return f"Comparison({runs})"

    def _repr_html_(self) -> str:
        def kind(time_kind: str) -> str:
            return "simulated" if time_kind == "simulated" else "measured host wall time"

        unit = self.frame["items_unit"].iloc[0] if len(self.frame) else "steps"
        rows = [(r.label, f"{fmt_time_s(r.time_s)} ({kind(r.time_kind)})",
                 fmt_bytes(r.hbm_bytes), f"{r.mfu_percent:.1f} %", r.op_count, r.fallback_count,
                 fmt_usd(r.usd_per_step), fmt_usd(r.usd_per_1m_items), f"{r.items_per_usd:,.4g}")
                for r in self.frame.itertuples()]
        table = html_table(rows, ("", "time", "HBM traffic", "MFU", "ops", "fallbacks", "USD / step",
                                  f"USD / 1M {unit}", f"{unit} / USD"), row_headers=True)
        notes = sorted({TPU_NOTE for d in self.frame["device"] if d in SIMULATED_DEVICES and kinds.for_device(d).compiled_timing})
        return table + "".join(f"<p><small>{html.escape(n)}</small></p>" for n in notes)


def _takes_device(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    return any(p.kind in positional for p in params)


def _targets_for(device: str, targets) -> list:
    if device not in SIMULATED_DEVICES:
        return [None]
    if targets is None:
        return [DEFAULT_TARGETS[device]]
    if isinstance(targets, Mapping):
        chosen = targets.get(device, DEFAULT_TARGETS[device])
        return [chosen] if isinstance(chosen, str) else list(chosen)
    # A plain list of names: each goes to the device whose presets know it.
    known = devices_available().get(device, [])
    mine = [t for t in targets if t in known]
    return mine or [DEFAULT_TARGETS[device]]


def split_device(name: str) -> tuple[str, str | None]:
    """``"tpu:v6e"`` -> ("tpu", "v6e"); ``"cuda"`` -> ("cuda", None): a device with a pinned target."""
    device, _, target = str(name).partition(":")
    return device, (target or None)


def _compiled(fn: Callable, device: str, backend: str | None) -> Callable:
    import torch
    backend = backend or ("inductor" if device == "cpu" else "neuron")
    ensure_compile_backend(backend)
    return torch.compile(fn, backend=backend)


def _row(label, device, target, compiled, time_s, kind, prof=None, wall=0.0, items_per_step=None) -> dict:
    s = prof.summary if prof is not None else {}
    priced = cost_columns(time_s, target if kind == "simulated" else None, items_per_step)
    return {"label": label, "device": device, "target": target or "", "compiled": compiled, "time_s": time_s,
            "time_kind": kind, "hbm_bytes": s.get("hbm_read_bytes", 0) + s.get("hbm_write_bytes", 0),
            "mfu_percent": s.get("mfu_estimated_percent", 0.0), "op_count": s.get("op_count", 0),
            "launch_count": s.get("launch_count", s.get("op_count", 0)),
            "fallback_count": s.get("fallback_count", 0), "wall_time_s": wall, **priced}


def compare(fn: Callable, devices: Sequence[str] = ("cpu", "cuda", "neuron"), compile: Sequence[bool] = (False,),
            targets=None, *, backend: str | None = None, tokens_per_step: float | None = None,
            timing_only: bool = False) -> Comparison:
    """Run ``fn`` per device, target and compile mode; ``fn(device)`` if it takes an argument.

    ``targets``: None (trn2 / h100), a mapping ``{"neuron": "trn1" or [...], "cuda": ...}``, or a
    list of preset names; a device named ``"tpu:v6e"`` (``"cuda:h100"``, ...) pins its target.
    TPU rows run on ``neuron`` and are timed on the compiled (XLA) path. ``tokens_per_step``
    (tokens or samples one call processes) turns the cost columns (``usd_per_step``, from the
    instance prices of ``backend.sim.pricing``) into USD per 1M tokens and tokens per USD;
    without it they count steps. ``backend`` overrides the torch.compile backend (default "neuron" on
    simulated devices, "inductor" on cpu). ``timing_only``: tensors made while ``fn`` runs hold
    shapes but no values (simulated devices only: the cpu row measures computing them).
    """
    if tokens_per_step is not None:
        positive("tokens_per_step", tokens_per_step)        # refused before anything runs
    if timing_only and "cpu" in devices:
        raise ValueError("compare(timing_only=True) needs simulated devices only: the cpu row measures host "
                         "wall time computing values; pass devices=('neuron', 'cuda')")
    with_device = _takes_device(fn)
    rows, profiles, results = [], {}, {}
    for named in devices:
        device, pinned = split_device(named)
        for target in ([pinned] if pinned else _targets_for(device, targets)):
            for compiled in compile:
                target_name = getattr(target, "name", target)   # a preset name or a derived config
                label = " ".join(x for x in (device, target_name, "compiled" if compiled else "") if x)
                run = _compiled(fn, device, backend) if compiled else fn
                # fn gets the torch device its tensors go to (a TPU's model runs on neuron)
                call = (lambda run=run, at=HOST_DEVICE.get(device, device): run(at)) if with_device else run
                with default_device(device, target, timing_only=timing_only):
                    graphs_before = len(compiled_graphs())
                    if compiled:
                        call()          # compile outside the measurement
                    if device in SIMULATED_DEVICES:
                        prof = profile(call, device=device, target=target, graphs_since=graphs_before,
                                       timing_only=timing_only)
                        prof.meta["compiled"] = bool(compiled)
                        profiles[label], results[label] = prof, prof.result
                        rows.append(_row(label, device, target_name, bool(compiled), prof.summary["total_time"],
                                         "simulated", prof, prof.meta["wall_time_s"], tokens_per_step))
                        continue
                    walls = []
                    for _ in range(_CPU_RUNS):
                        start = time.perf_counter()
                        results[label] = call()
                        walls.append(time.perf_counter() - start)
                wall = statistics.median(walls)
                profiles[label] = None
                rows.append(_row(label, device, target_name, bool(compiled), wall, "measured host wall time", wall=wall,
                                 items_per_step=tokens_per_step))
                log.info("%s: %.3g s measured host wall time (no simulator on %s)", label, wall, device)
    return Comparison(pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS)), profiles, results)
