"""Memory of the migration report: what one step holds in HBM and which batch sizes fit.

Measured on the neuron device's memory books (``torch.neuron.memory_allocated`` and the peak
counter, reset per phase) during the first step of a fresh replica: parameters, inputs, the
activations the forward pass keeps (its peak above what was allocated before it), what the
backward pass holds above the gradients (remaining activations, activation gradients), the
gradients, the optimizer state the first ``optimizer.step()`` allocates (Adam: two moments per
parameter) and the optimizer's temporaries.

In a steady-state step the optimizer state lives throughout, so the peak is the largest of
    forward:   parameters + state + inputs + activations
    backward:  parameters + state + inputs + backward activations + gradients
    optimizer: parameters + state + inputs + gradients + optimizer temporaries
What fits is an estimate: inputs and the activation terms grow linearly in the batch from the
measured one; parameters, gradients, state and temporaries do not.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch.utils._pytree import tree_flatten

from backend.sim.checks import positive_int
from workbench.migration.run import PHASES, Step, replica, to_device

__all__ = ["MemoryFit", "measure_memory", "fit_memory", "BATCH_COLUMNS", "CATEGORIES"]

BATCH_COLUMNS = ("batch_size", "estimated_peak_bytes", "peak_phase", "fits", "measured")
CATEGORIES = ("parameters", "optimizer_state", "gradients", "optimizer_temporaries", "inputs", "activations",
              "backward_activations")
_SCALED = ("inputs", "activations", "backward_activations")          # grow with the batch
# phase -> the categories live at its peak
_AT_PEAK = {"forward": ("parameters", "optimizer_state", "inputs", "activations"),
            "backward": ("parameters", "optimizer_state", "inputs", "backward_activations", "gradients"),
            "optimizer": ("parameters", "optimizer_state", "inputs", "gradients", "optimizer_temporaries")}
_MAX_DEFAULT_ROWS = 16


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def measure_memory(model: torch.nn.Module, args, kwargs, *, training: bool, loss_fn=None,
                   optimizer=None) -> dict:
    """Bytes per category (``CATEGORIES``) for one step of a neuron replica of ``model``."""
    books = torch.neuron
    net = replica(model, "neuron")
    step = Step(net, training, loss_fn, optimizer)
    dev_args, dev_kwargs = to_device((args, kwargs), "neuron")
    gc.collect()
    before = books.memory_allocated()
    books.reset_peak_memory_stats()
    marks: dict = {}

    def mark(phase: str) -> None:
        marks[phase] = (books.memory_allocated(), books.max_memory_allocated())
        if phase == "backward":
            marks["grads"] = _nbytes(p.grad for p in net.parameters())
        books.reset_peak_memory_stats()      # each phase gets its own peak

    step.run(dev_args, dev_kwargs, mark=mark)
    grads = marks.get("grads", 0)
    out = {"parameters": _nbytes(net.parameters()) + _nbytes(net.buffers()),
           "inputs": _nbytes(tree_flatten((dev_args, dev_kwargs))[0]),
           "activations": max(0, marks["forward"][1] - before), "gradients": grads,
           "backward_activations": 0, "optimizer_state": 0, "optimizer_temporaries": 0}
    if training:
        out["backward_activations"] = max(0, marks["backward"][1] - before - grads)
        out["optimizer_state"] = max(0, marks["optimizer"][0] - marks["backward"][0])
        out["optimizer_temporaries"] = max(0, marks["optimizer"][1] - marks["optimizer"][0])
    del step, net, dev_args, dev_kwargs
    gc.collect()
    return out


@dataclass
class MemoryFit:
    """HBM needed by one step against the target's per-core HBM, and the batch sizes that fit."""

    target: str
    capacity_bytes: int
    batch_size: int
    measured: dict                       # category -> bytes at the measured batch
    training: bool = True
    batches: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""

    def __getattr__(self, name: str):
        # parameters_bytes, activations_bytes, ...: the measured categories as attributes
        if name.endswith("_bytes") and name[:-6] in CATEGORIES:
            return int(self.measured[name[:-6]])
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def phases(self) -> tuple:
        return PHASES if self.training else PHASES[:1]

    def phase_breakdown(self, batch: int) -> dict:
        """Phase -> {category: bytes} live at its peak at ``batch`` (scaled ones linear in the batch)."""
        scale = batch / max(1, self.batch_size)
        return {phase: {c: self.measured[c] * (scale if c in _SCALED else 1) for c in _AT_PEAK[phase]}
                for phase in self.phases}

    def phase_bytes(self, batch: int) -> dict:
        return {phase: sum(parts.values()) for phase, parts in self.phase_breakdown(batch).items()}

    def estimate(self, batch: int) -> int:
        return int(round(max(self.phase_bytes(batch).values())))

    def peak_phase(self, batch: int) -> str:
        by_phase = self.phase_bytes(batch)
        return max(by_phase, key=by_phase.get)

    @property
    def peak_bytes(self) -> int:
        """Estimated peak at the given batch."""
        return self.estimate(self.batch_size)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def max_batch_size(self) -> int:
        """Largest batch whose estimated peak fits in every phase (0: not even batch 1)."""
        best = None
        for phase in self.phases:
            fixed = sum(self.measured[c] for c in _AT_PEAK[phase] if c not in _SCALED)
            per_sample = sum(self.measured[c] for c in _AT_PEAK[phase] if c in _SCALED) / max(1, self.batch_size)
            room = self.capacity_bytes - fixed
            limit = 0 if room < 0 else int(room // per_sample) if per_sample else None
            best = limit if best is None else best if limit is None else min(best, limit)
        while best and self.estimate(best) > self.capacity_bytes:     # float rounding at the edge
            best -= 1
        return max(0, best or 0)

    def to_frame(self) -> pd.DataFrame:
        """One row per category: bytes at the measured batch and share of the HBM."""
        rows = [(c, self.measured[c]) for c in CATEGORIES] + [("estimated peak", self.peak_bytes),
                                                               ("capacity", self.capacity_bytes)]
        frame = pd.DataFrame(rows, columns=["category", "bytes"])
        frame["percent_of_hbm"] = 100.0 * frame["bytes"] / self.capacity_bytes
        return frame


def _default_batches(batch: int, max_fit: int) -> list[int]:
    top = max(batch, max_fit, 1) * 2
    sizes, b = set(), 1
    while b <= top:
        sizes.add(b)
        b *= 2
    sizes.update(x for x in (batch, max_fit) if x > 0)
    return sorted(sizes)[-_MAX_DEFAULT_ROWS:]


def fit_memory(measured: dict, *, batch: int, capacity_bytes: int, target: str, training: bool = True,
               batch_sizes=None) -> MemoryFit:
    """The fit of a measured step against ``capacity_bytes``, extrapolated over batch sizes."""
    fit = MemoryFit(target=target, capacity_bytes=int(capacity_bytes), batch_size=batch,
                    measured={c: int(measured[c]) for c in CATEGORIES}, training=training)
    sizes = sorted({positive_int("batch size", b) for b in batch_sizes}) if batch_sizes else _default_batches(batch, fit.max_batch_size)
    fit.batches = pd.DataFrame([(b, fit.estimate(b), fit.peak_phase(b), fit.estimate(b) <= fit.capacity_bytes,
                                 b == batch) for b in sizes], columns=list(BATCH_COLUMNS))
    fit.note = (f"estimate: inputs and activations scaled linearly from the measured batch of {batch}; parameters, "
                "gradients, optimizer state and temporaries fixed; the peak is the largest of the forward, "
                "backward and optimizer phases of a steady-state step")
    if fit.max_batch_size == 0:
        fit.note += "; not even batch 1 fits"
    return fit
