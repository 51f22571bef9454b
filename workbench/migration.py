"""``migration_report()``: what it would take to move a PyTorch model from a GPU to Trainium.

One call runs the model (on replicas; the model passed in is never modified) and answers five
questions, each as dataclass fields and DataFrames:

- op coverage: every aten op of a training step (forward, backward, optimizer step), lowered on
  the NeuronCore or run as a host fallback, with calls and simulated cost (transfers included);
- numerics: per-layer drift of ``neuron`` with hardware numerics (bf16 matmul inputs) against
  CPU fp32, worst layers named, layers past ``drift_threshold`` flagged with a suggestion;
- compile readiness: graph breaks with reasons and source lines, recompiles, mode caveats, and
  the step compiled with ``backend="neuron"`` (or why there is none);
- performance: simulated step time and MFU on the target and on the baseline GPU (both costing
  the same op stream), and where the NeuronCore's time goes;
- memory: parameters, activations, gradients and optimizer state against the target's per-core
  HBM, and the largest batch that fits (an estimate: activations scale linearly in the batch).

A small GPT-style model, trained on trn2 against an H100::

    import torch, workbench as wb
    from torch import nn

    class TinyGPT(nn.Module):
        def __init__(self, vocab=512, d=128, heads=4, layers=2, seq=64):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers)
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))

    report = wb.migration_report(TinyGPT(), torch.randint(0, 512, (8, 64)), target="trn2", baseline="h100")
    report.findings                 # the headline, one line per question
    report.coverage                 # DataFrame: op, status, calls, phases, time_ns, ...
    report.show()                   # the widget, in a notebook
    report.save_html("gpt_migration.html")

A CNN, inference only, with a batch sweep::

    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(64, 10))
    report = wb.migration_report(cnn, torch.randn(16, 3, 32, 32), training=False, batch_sizes=[16, 256, 4096])
    report.memory.batches           # estimated peak HBM per batch size, and whether it fits
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from backend.sim.gpu import get_gpu
from backend.sim.presets import DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET, get_target
from workbench.format import fmt_bytes, fmt_time_s
from workbench.migration_compile import CompileReadiness, compile_readiness
from workbench.migration_memory import MemoryFit, fit_memory, measure_memory
from workbench.migration_numerics import DEFAULT_DRIFT_THRESHOLD, Numerics, layer_drift
from workbench.migration_perf import coverage_table, performance_table, time_breakdown
from workbench.migration_run import batch_size, call_args, float_dtype, record_step, roomy_device

__all__ = ["migration_report", "migration_report_for", "MigrationReport", "DEFAULT_DRIFT_THRESHOLD"]

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

    # -- derived ---------------------------------------------------------------------------
    @property
    def fallbacks(self) -> pd.DataFrame:
        """The coverage rows that ran on the host."""
        return self.coverage[self.coverage["status"] == "host fallback"].reset_index(drop=True)

    def _step(self, device: str, mode: str = "eager"):
        rows = self.performance[(self.performance["device"] == device) & (self.performance["mode"] == mode)]
        return rows.iloc[0] if len(rows) else None

    @property
    def findings(self) -> list[str]:
        """One line per question, the answer first."""
        out = []
        cov, fb = self.coverage, self.fallbacks
        compute = cov[cov["status"].isin(("lowered", "host fallback"))]
        if len(fb):
            share = fb["percent_of_step"].sum()
            out.append(f"op coverage: {len(fb)} of {len(compute)} op types fall back to the host "
                       f"({', '.join(fb['op'])}): {fmt_time_s(fb['time_ns'].sum() * 1e-9)}, "
                       f"{share:.1f} % of the {self.target} step")
        else:
            out.append(f"op coverage: all {len(compute)} op types lower on the NeuronCore")
        num = self.numerics
        if num.flagged:
            origins = num.drift_origins or num.flagged
            out.append(f"numerics: {len(num.flagged)} layer(s) drift past {num.threshold:g}, starting at "
                       f"{', '.join(origins[:4])}{', ...' if len(origins) > 4 else ''}; "
                       f"model output drift {num.output_rel_error:.3g}")
        else:
            out.append(f"numerics: no layer drifts past {num.threshold:g} (worst {num.max_rel_error:.3g} max, "
                       f"model output {num.output_rel_error:.3g} mean)")
        comp = self.compile
        line = f"compile: {comp.graph_break_count} graph break(s), {len(comp.recompiles)} recompile(s)"
        if len(comp.breaks):
            first = comp.breaks.iloc[0]
            line += f"; first: {first['reason']} at {first['source'] or 'unknown line'}"
        if comp.compiled_error:
            line += f"; no compiled step ({comp.compiled_error})"
        out.append(line)
        neuron, gpu = self._step("neuron"), self._step("cuda")
        if neuron is not None and gpu is not None:
            out.append(f"performance: eager step {fmt_time_s(neuron.step_time_s)} on {self.target} vs "
                       f"{fmt_time_s(gpu.step_time_s)} on {self.baseline} "
                       f"({neuron.step_time_s / gpu.step_time_s:.2f}x), MFU {neuron.mfu_percent:.1f} % vs "
                       f"{gpu.mfu_percent:.1f} %")
        compiled = self._step("neuron", "compiled")
        if compiled is not None:
            out.append(f"performance: compiled step {fmt_time_s(compiled.step_time_s)} on {self.target}")
        mem = self.memory
        verdict = "fits" if mem.fits else "does NOT fit"
        out.append(f"memory: batch {mem.batch_size} needs ~{fmt_bytes(mem.peak_bytes)} of "
                   f"{fmt_bytes(mem.capacity_bytes)} HBM per core: {verdict}; largest batch that fits "
                   f"≈ {mem.max_batch_size} (estimate)")
        return out

    def to_frames(self) -> dict:
        """Every table of the report by name."""
        return {"coverage": self.coverage, "numerics": self.numerics.layers, "graph_breaks": self.compile.breaks,
                "recompiles": self.compile.recompiles, "performance": self.performance,
                "time_breakdown": self.time_breakdown, "memory": self.memory.to_frame(),
                "batch_sizes": self.memory.batches}

    # -- views -----------------------------------------------------------------------------
    def figures(self) -> dict:
        from workbench.migration_view import report_figures
        return report_figures(self)

    def _repr_html_(self) -> str:
        from workbench.migration_view import report_html
        return report_html(self, figures=False, standalone=False)

    def __repr__(self) -> str:
        return f"MigrationReport({self.model_name} on {self.target} vs {self.baseline}:\n  " + \
            "\n  ".join(self.findings) + ")"

    def show(self):
        """Display the report widget (Jupyter) and return it."""
        from IPython.display import display

        from workbench.migration_view import widget
        view = widget(self)
        display(view)
        return view

    def save_html(self, path) -> Path:
        """Write a standalone HTML report (plotly.js inline: opens offline)."""
        from workbench.migration_view import report_html
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_html(self), encoding="utf-8")
        return path


def _profiles(recordings, target: str, baseline: str) -> dict:
    from workbench.profiles import Profile
    out = {}
    for rec in recordings:
        for device, name, trace in (("neuron", target, rec.neuron), ("cuda", baseline, rec.baseline)):
            out[f"{name} {rec.mode}"] = Profile(trace, rec.graphs if device == "neuron" else (),
                                                meta={"device": device, "target": name, "device_kind": device,
                                                      "compiled": rec.mode == "compiled"})
    return out


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
                     loss_fn=None, optimizer=None, compile: bool = True) -> MigrationReport:
    """Report what moving ``model`` from ``baseline`` (a GPU preset) to ``target`` would take.

    ``example_inputs``: a tensor, a tuple of positional arguments or a dict of keyword arguments;
    dim 0 of the first tensor is the batch. ``target``: a NeuronCore preset name or a config
    from ``backend.sim.presets.derive``. ``training``: cost forward, backward and the optimizer
    step (``optimizer``: a factory taking parameters, default ``torch.optim.Adam``; ``loss_fn``:
    output -> scalar, default the mean of the first floating output) instead of inference.
    ``batch_sizes``: the batch sizes the memory table estimates (default: powers of two).
    ``compile=False`` skips the compiled step (graph breaks are still reported).
    """
    start = time.perf_counter()
    cfg = get_target(target)
    baseline = get_gpu(baseline).name
    args, kwargs = call_args(example_inputs)
    batch = batch_size(args, kwargs)
    common = {"target": cfg, "baseline": baseline, "training": training, "loss_fn": loss_fn, "optimizer": optimizer}
    with roomy_device(cfg):
        numerics = layer_drift(model, args, kwargs, threshold=drift_threshold)
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
        model_name=type(model).__name__, target=cfg.name, baseline=baseline, training=training, batch_size=batch,
        dtype=str(float_dtype(model))[6:], coverage=coverage_table(eager), numerics=numerics, compile=readiness,
        performance=performance_table(recordings, cfg.name, baseline), time_breakdown=time_breakdown(recordings),
        memory=fit_memory(measured, batch=batch, capacity_bytes=cfg.hbm_bytes, target=cfg.name, training=training,
                          batch_sizes=batch_sizes),
        profiles=_profiles(recordings, cfg.name, baseline), wall_time_s=time.perf_counter() - start)
    log.info("migration report of %s in %.1f s", report.model_name, report.wall_time_s)
    return report
