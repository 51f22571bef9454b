"""Compile readiness of the migration report: graph breaks, recompiles, modes, compiled step.

Graph breaks come from ``torch._dynamo.explain`` on a CPU replica (independent of any backend,
so a break is the model's, not the simulator's), each with Dynamo's reason, its hint and the
user source line. Then a neuron replica is compiled with ``backend="neuron"`` and one step is
recorded: the compiled time, the graphs the backend registered and their recompiles. When that
fails, or Dynamo hands the backend nothing, the report says why instead of a number.

``explain`` calls ``torch._dynamo.reset()``: functions compiled earlier in the session
recompile on their next call. The neuron backend is registered again afterwards.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from workbench.migration.run import StepRecording, replica, to_device

__all__ = ["CompileReadiness", "compile_readiness", "BREAK_COLUMNS", "RECOMPILE_COLUMNS"]

log = logging.getLogger(__name__)

BREAK_COLUMNS = ("reason", "hint", "source", "code", "seen_by")
RECOMPILE_COLUMNS = ("graph", "reason")
_TORCH_DIR = str(Path(torch.__file__).parent)


@dataclass
class CompileReadiness:
    graph_count: int = 0
    breaks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(BREAK_COLUMNS)))
    recompiles: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(RECOMPILE_COLUMNS)))
    compiled: StepRecording | None = None
    compiled_error: str | None = None      # why there is no compiled step, when there is none
    notes: list = field(default_factory=list)

    @property
    def graph_break_count(self) -> int:
        return len(self.breaks)

    @property
    def ready(self) -> bool:
        """One graph, no break, no recompile, and the neuron backend compiled it."""
        return self.compiled is not None and not len(self.breaks) and not len(self.recompiles)


def _first_line(text, limit: int = 200) -> str:
    line = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _hint(text: str) -> str:
    return next((line.strip()[5:].strip() for line in str(text).splitlines()
                 if line.strip().startswith("Hint:")), "")


def _explain_breaks(model: torch.nn.Module, args, kwargs) -> tuple[int, list[dict]]:
    cpu_model = replica(model, "cpu")
    cpu_args, cpu_kwargs = to_device((args, kwargs), "cpu")
    with torch.no_grad(), torch.device("cpu"):
        out = torch._dynamo.explain(cpu_model)(*cpu_args, **cpu_kwargs)
    rows, seen = [], set()
    for r in out.break_reasons:
        # innermost frame of user code (torch's own frames, like a device context, skipped)
        frame = next((f for f in reversed(r.user_stack or []) if _TORCH_DIR not in f.filename),
                     r.user_stack[-1] if r.user_stack else None)
        source = f"{frame.filename}:{frame.lineno}" if frame else ""
        key = (_first_line(r.reason), source)
        if key in seen:                      # one break, reported once per graph it splits
            continue
        seen.add(key)
        rows.append({"reason": key[0], "hint": _hint(r.reason), "source": source,
                     "code": (frame.line or "").strip() if frame else "", "seen_by": "dynamo explain (cpu)"})
    return out.graph_count, rows


def _new_breaks(before: Counter) -> list[str]:
    from torch._dynamo.utils import counters
    return [reason for reason, n in counters["graph_break"].items() if n > before.get(reason, 0)]


def _mode_notes() -> list[str]:
    from backend.compile import SUPPORTED_MODES

    others = [m for m in SUPPORTED_MODES if m != "default"]
    return [f"torch.compile modes {', '.join(others)} compile as mode='default' on the neuron backend "
            "(no autotuning or CUDA graphs on a NeuronCore)"] if others else []


def compile_readiness(model: torch.nn.Module, args, kwargs, *,
                      record: Callable[[], StepRecording]) -> CompileReadiness:
    """Graph breaks of ``model`` and, through ``record()``, its step compiled on neuron."""
    from torch._dynamo.utils import counters

    out = CompileReadiness(notes=_mode_notes())
    try:
        out.graph_count, rows = _explain_breaks(model, args, kwargs)
    except Exception as exc:         # the model cannot even be traced: say so, go on
        out.notes.append(f"torch._dynamo.explain failed: {type(exc).__name__}: {_first_line(exc)}")
        rows = []
    before = Counter(counters["graph_break"])
    try:
        out.compiled = record()
    except Exception as exc:
        out.compiled_error = f"compiling with backend='neuron' failed: {type(exc).__name__}: {_first_line(exc)}"
    explained = {r["reason"] for r in rows}
    neuron_only = [b for b in _new_breaks(before) if _first_line(b) not in explained]
    rows += [{"reason": _first_line(b), "hint": _hint(b), "source": "", "code": "",
              "seen_by": "neuron backend"} for b in neuron_only]
    out.breaks = pd.DataFrame(rows, columns=list(BREAK_COLUMNS))
    rec = out.compiled
    if rec is not None and not any(op.kind == "kernel" for op in rec.neuron.ops):
        why = "; ".join(_first_line(b) for b in neuron_only) or "no graph reached the backend"
        out.compiled_error = f"the neuron backend compiled no kernel: Dynamo ran the model eagerly ({why})"
        out.compiled = None
    if rec is not None:
        out.recompiles = pd.DataFrame([(g.name, reason) for g in rec.graphs if g.is_recompile
                                       for reason in (g.recompile_reasons or ["(new compile id)"])],
                                      columns=list(RECOMPILE_COLUMNS))
    if out.compiled_error:
        log.info("migration: %s", out.compiled_error)
    return out
