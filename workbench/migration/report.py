"""``MigrationReport``, the data of a migration report, and ``migration_report()``, which makes it.

The report holds tables and dataclasses; ``view`` words and draws them (findings, HTML, figures,
widget).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from backend.sim.checks import positive, positive_int
from backend.sim.presets import DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET, get_target
from workbench.migration.compile import CompileReadiness, compile_readiness
from workbench.migration.memory import MemoryFit, fit_memory, measure_memory
from backend.device.timing_only import timing_only as timing_only_mode
from workbench.migration.chips import fit_for_report
from workbench.migration.custom_code import custom_code_table
from workbench.migration.numerics import DEFAULT_DRIFT_THRESHOLD, Numerics, layer_drift, not_compared
from workbench.migration.perf import coverage_table, performance_table, time_breakdown
from workbench.migration.run import batch_size, call_args, float_dtype, record_step, roomy_device
from workbench.migration.targets import RUN_TARGET_FOR_OTHERS, CostTarget, cost_target

__all__ = ["migration_report", "migration_report_for", "MigrationReport"]

log = logging.getLogger(__name__)


@dataclass(repr=False)
class MigrationReport:
    """Everything ``migration_report`` found; ``to_frames()`` has every table."""

    model_name: str
    target: str
    baseline: str
    training: bool
    batch_size: int
    dtype: str
    coverage: pd.DataFrame
    numerics: Numerics
    compile: CompileReadiness
    performance: pd.DataFrame
    time_breakdown: pd.DataFrame
    memory: MemoryFit
    profiles: dict = field(default_factory=dict)     # label -> wb.Profile of each recorded step
    wall_time_s: float = 0.0
    target_device: str = "neuron"                    # the target's cost model: neuron or tpu (or cuda)
    baseline_device: str = "cuda"
    items_per_step: float = 0.0                      # tokens (or samples) one step processes
    items_unit: str = "samples"
    chip_fit: object = None                          # workbench.fit.ChipFit, when fit_chips was asked
    custom_code: pd.DataFrame | None = None          # custom GPU code: blockers until ported to NKI

    # -- derived ---------------------------------------------------------------------------
    @property
    def fallbacks(self) -> pd.DataFrame:
        """The coverage rows that ran on the host."""
        return self.coverage[self.coverage["status"] == "host fallback"].reset_index(drop=True)

    def step(self, device: str, mode: str = "eager"):
        """The performance row of ``device`` ("neuron", "cuda", "tpu") or of a role ("target",
        "baseline") in ``mode``, or None."""
        perf = self.performance
        rows = perf[((perf["device"] == device) | (perf["role"] == device)) & (perf["mode"] == mode)]
        return rows.iloc[0] if len(rows) else None

    def target_profile(self, mode: str = "eager"):
        return self.profiles.get(f"{self.target} {mode}")

    @property
    def findings(self) -> list[str]:
        """One line per question, the answer first (worded by the view)."""
        from workbench.migration.view import findings
        return findings(self)

    def to_frames(self) -> dict:
        """Every table of the report by name."""
        return {"coverage": self.coverage, "numerics": self.numerics.layers, "graph_breaks": self.compile.breaks,
                "recompiles": self.compile.recompiles, "performance": self.performance,
                "time_breakdown": self.time_breakdown, "memory": self.memory.to_frame(),
                "batch_sizes": self.memory.batches,
                **({"custom_code": self.custom_code} if self.custom_code is not None and len(self.custom_code) else {}),
                **({"chips": self.chip_fit.tried} if self.chip_fit is not None else {})}

    # -- views -----------------------------------------------------------------------------
    def figures(self) -> dict:
        from workbench.migration.view import report_figures
        return report_figures(self)

    def _repr_html_(self) -> str:
        from workbench.migration.view import report_html
        return report_html(self, figures=False, standalone=False)

    def __repr__(self) -> str:
        return f"MigrationReport({self.model_name} on {self.target} vs {self.baseline}:\n  " + \
            "\n  ".join(self.findings) + ")"

    def show(self):
        """Display the report widget (Jupyter) and return it."""
        from IPython.display import display

        from workbench.migration.view import widget
        view = widget(self)
        display(view)
        return view

    def save_html(self, path) -> Path:
        """Write a standalone HTML report (plotly.js inline: opens offline)."""
        from workbench.migration.view import report_html
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_html(self), encoding="utf-8")
        return path


def _profiles(recordings, target: CostTarget, baseline: CostTarget, timing_only: bool = False) -> dict:
    from workbench.profiles import Profile
    out = {}
    for rec in recordings:
        for role, side, trace in (("target", target, rec.target_trace), ("baseline", baseline, rec.baseline)):
            on_neuron = trace is rec.neuron
            prof = Profile(trace, rec.graphs if on_neuron else (),
                           meta={"device": side.device, "target": side.name, "device_kind": side.device,
                                 "compiled": rec.mode == "compiled", "timing_only": timing_only})
            # each side's profile can replay itself under other assumptions: Profile.time_band()
            prof.replay, prof.workload_target = rec.replays.get(role), side.config
            if on_neuron:
                prof.workload = rec.workload
            out[f"{side.name} {rec.mode}"] = prof
    return out


def items_per_step(args, kwargs) -> tuple[int, str]:
    """Tokens per step when the first tensor input holds token ids (integers, batch x sequence),
    else samples (its batch dimension)."""
    from torch.utils._pytree import tree_flatten
    first = next(t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dim() > 0)
    if not first.is_floating_point() and not first.is_complex() and first.dim() >= 2:
        return first.numel(), "tokens"
    return int(first.shape[0]), "samples"


def migration_report_for(namespace: dict, model: str = "model", inputs: str = "x", **options) -> MigrationReport:
    """``migration_report`` of the model and inputs named in ``namespace`` (a notebook's
    ``user_ns``, a script's globals): what ``%neuron_migrate model x`` and the CLI call."""
    def lookup(name: str, what: str):
        if name not in namespace:
            modules = sorted(k for k, v in namespace.items() if isinstance(v, torch.nn.Module) and k[0] != "_")
            hint = f"; nn.Modules defined: {', '.join(modules)}" if modules else ""
            raise ValueError(f"no {what} named {name!r}{hint}")
        return namespace[name]

    net = lookup(model, "model")
    if not isinstance(net, torch.nn.Module):
        raise TypeError(f"{model!r} is a {type(net).__name__}, not an nn.Module")
    return migration_report(net, lookup(inputs, "inputs"), **options)


def migration_report(model: torch.nn.Module, example_inputs, target=DEFAULT_NEURON_TARGET, baseline: str = DEFAULT_GPU_TARGET, *,
                     training: bool = True, batch_sizes=None, drift_threshold: float = DEFAULT_DRIFT_THRESHOLD,
                     loss_fn=None, optimizer=None, compile: bool = True, band: bool = False,
                     timing_only: bool = False, fit_chips=None) -> MigrationReport:
    """Report what moving ``model`` from ``baseline`` (a GPU preset) to ``target`` would take.

    ``example_inputs``: a tensor, a tuple of positional arguments or a dict of keyword arguments;
    dim 0 of the first tensor is the batch. ``target``: a NeuronCore preset name or a config
    from ``backend.sim.presets.derive``. ``training``: cost forward, backward and the optimizer
    step (``optimizer``: a factory taking parameters, default ``torch.optim.Adam``; ``loss_fn``:
    output -> scalar, default the mean of the first floating output) instead of inference.
    ``batch_sizes``: the batch sizes the memory table estimates (default: powers of two).
    ``compile=False`` skips the compiled step (graph breaks are still reported).

    ``target`` and ``baseline`` may name any simulated device as ``device:preset`` ("tpu:v6e",
    "neuron:trn1", "cuda:a100"): the model runs on a NeuronCore (``target``'s, else trn2, which
    also reports op coverage) and each side costs the same op stream; a TPU on the compiled
    (XLA) path. The findings lead with tokens (or samples) per dollar on each side, from the
    instance prices of ``backend.sim.pricing``; ``band=True`` adds the target's timing error band
    (``Profile.time_band()``: about two replays of the step per assumption of the target's model).
    ``timing_only``: the replicas hold shapes but no values (``torch.neuron.timing_only()``), for
    models larger than the host; every answer but numerics (which compares values) is the same.
    ``fit_chips``: also find the smallest number of chips the training step fits on, and its step
    time there -- a plan ("fsdp", "ddp") or a dict of ``wb.fit_chips`` keywords (``hbm_bytes``
    for a what-if HBM, ``max_chips``); the "chips" section shows it.
    """
    positive("drift_threshold", drift_threshold)        # refused before the model runs
    for size in batch_sizes or ():
        positive_int("batch size in batch_sizes", size)
    start = time.perf_counter()
    target_side, baseline_side = cost_target(target, "neuron"), cost_target(baseline, "cuda")
    cfg = target_side.config if target_side.device == "neuron" else get_target(RUN_TARGET_FOR_OTHERS)
    baseline = baseline_side.name
    args, kwargs = call_args(example_inputs)
    batch = batch_size(args, kwargs)
    items, unit = items_per_step(args, kwargs)
    common = {"target": target_side, "baseline": baseline_side, "training": training, "loss_fn": loss_fn,
              "optimizer": optimizer, "runs_on": cfg}
    with roomy_device(cfg), timing_only_mode(timing_only):
        numerics = (not_compared(drift_threshold) if timing_only
                    else layer_drift(model, args, kwargs, threshold=drift_threshold))
        measured = measure_memory(model, args, kwargs, training=training, loss_fn=loss_fn, optimizer=optimizer)
        eager = record_step(model, args, kwargs, **common)
        if compile:
            readiness = compile_readiness(model, args, kwargs,
                                          record=lambda: record_step(model, args, kwargs, compiled=True, **common))
        else:
            readiness = compile_readiness(model, args, kwargs, record=lambda: None)
            readiness.compiled_error = "not requested (compile=False)"
    recordings = [eager] + ([readiness.compiled] if readiness.compiled is not None else [])
    report = MigrationReport(
        model_name=type(model).__name__, target=target_side.name, baseline=baseline, training=training,
        batch_size=batch, dtype=str(float_dtype(model))[6:], coverage=coverage_table(eager), numerics=numerics,
        compile=readiness,
        performance=performance_table(recordings, target_side.name, baseline, target_device=target_side.device,
                                      baseline_device=baseline_side.device, items_per_step=items, unit=unit),
        time_breakdown=time_breakdown(recordings),
        memory=fit_memory(measured, batch=batch, capacity_bytes=target_side.hbm_bytes, target=target_side.name,
                          training=training, batch_sizes=batch_sizes),
        profiles=_profiles(recordings, target_side, baseline_side, timing_only),
        custom_code=custom_code_table(model, eager),
        wall_time_s=time.perf_counter() - start,
        target_device=target_side.device, baseline_device=baseline_side.device, items_per_step=items,
        items_unit=unit)
    if band:
        from workbench.migration.price import headline_mode

        prof = report.target_profile(headline_mode(report))
        if prof is not None and prof.replay is not None:
            prof.time_band()
        else:
            log.info("no timing error band for %s %s: its step was not recorded", target_side.device,
                     target_side.name)
    if fit_chips is not None:
        report.chip_fit = fit_for_report(model, args, kwargs, cfg, fit_chips)
        report.wall_time_s = time.perf_counter() - start
    log.info("migration report of %s in %.1f s", report.model_name, report.wall_time_s)
    return report
