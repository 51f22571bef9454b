"""Numerics of the migration report: per-layer drift of ``neuron`` against a CPU fp32 reference.

Two replicas with identical weights see identical inputs (eval mode, same RNG seed): the CPU
one in fp32, the neuron one with hardware numerics on (fp32 matmul inputs rounded to bf16,
fp32 accumulation) or, for a bf16 model, in its own dtype. Forward hooks on every leaf module
and on the model itself keep the reference's inputs and outputs; the neuron run's hooks compare
against them call by call, so a layer's drift can be told apart from the drift it inherited.

Errors are normwise, so they stay meaningful where values cross zero:
``rel_error_mean = sum|got - ref| / sum|ref|`` and ``rel_error_max = max|got - ref| / max|ref|``.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch.utils._pytree import tree_flatten

from backend.sim.checks import positive
from workbench.migration.run import replica, to_device

__all__ = ["Numerics", "layer_drift", "not_compared", "LAYER_COLUMNS", "DEFAULT_DRIFT_THRESHOLD"]

log = logging.getLogger(__name__)

# bf16 keeps 8 significant bits (relative step 2^-8 = 0.4 %); a matmul with fp32 accumulation
# lands well under 1 %, so a layer drifting past 2 % lost more than rounding explains.
DEFAULT_DRIFT_THRESHOLD = 0.02
LARGE_INPUT = 1e3          # |x| above this: bf16's absolute step (>= 4) swamps small differences
LAYER_COLUMNS = ("order", "layer", "type", "calls", "numel", "rel_error_mean", "rel_error_max",
                 "input_rel_error_mean", "input_absmax", "introduced", "flagged", "suggestion")
MODEL_LAYER = "(model)"


def _floats(value) -> list:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _host32(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float32)


class _Drift:
    """Running normwise error sums of one layer's tensors over its calls."""

    __slots__ = ("abs_diff", "abs_ref", "max_diff", "max_ref", "numel")

    def __init__(self):
        self.abs_diff = self.abs_ref = self.max_diff = self.max_ref = 0.0
        self.numel = 0

    def add(self, ref: torch.Tensor, got: torch.Tensor) -> None:
        if ref.shape != got.shape:
            raise ValueError(f"shapes differ between the runs: {tuple(ref.shape)} vs {tuple(got.shape)}")
        diff = (got - ref).abs().nan_to_num(nan=float("inf"))
        self.abs_diff += float(diff.sum())
        self.abs_ref += float(ref.abs().sum())
        if diff.numel():
            self.max_diff = max(self.max_diff, float(diff.max()))
            self.max_ref = max(self.max_ref, float(ref.abs().max()))
        self.numel += ref.numel()

    @property
    def rel_mean(self) -> float:
        return self.abs_diff / self.abs_ref if self.abs_ref else (0.0 if not self.abs_diff else float("inf"))

    @property
    def rel_max(self) -> float:
        return self.max_diff / self.max_ref if self.max_ref else (0.0 if not self.max_diff else float("inf"))


@contextlib.contextmanager
def _no_fastpath():
    """Eval-mode transformer layers take a fused fast path that skips their submodules (no
    hooks fire) and the matmul ops hardware numerics rounds: take the module path instead."""
    mha = torch.backends.mha
    previous = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(previous)


class _LayerHooks:
    """Forward hooks on every module of the two replicas: the reference run keeps its inputs and
    outputs, the neuron run compares against them call by call (nothing of its own is kept)."""

    def __init__(self, ref_model: torch.nn.Module, dev_model: torch.nn.Module):
        self.order: dict = {}
        self.kept: dict = {}             # name -> [(inputs, outputs)] of the reference calls
        self.identity: set = set()       # modules that returned their input (eval-mode dropout)
        self.outs, self.ins, self.absmax, self.seen = {}, {}, {}, {}
        self.types = {n or MODEL_LAYER: type(m).__name__ for n, m in ref_model.named_modules()}
        self.children = {n or MODEL_LAYER: [f"{n}.{c}" if n else c for c, _ in m.named_children()]
                         for n, m in ref_model.named_modules()}
        self.compared: set = set()
        for (name, m_ref), (_, m_dev) in zip(ref_model.named_modules(), dev_model.named_modules()):
            m_ref.register_forward_hook(self._keep(name or MODEL_LAYER))
            m_dev.register_forward_hook(self._compare(name or MODEL_LAYER))

    def _keep(self, name):
        def hook(module, inputs, output):
            self.order.setdefault(name, len(self.order))
            if inputs and output is inputs[0]:
                self.identity.add(name)
            self.kept.setdefault(name, []).append(([_host32(t) for t in _floats(inputs)],
                                                   [_host32(t) for t in _floats(output)]))
        return hook

    def _compare(self, name):
        def hook(module, inputs, output):
            calls = self.kept.get(name, []) if name in self.compared else []
            i = self.seen[name] = self.seen.get(name, -1) + 1
            if i >= len(calls):          # not reported, or data-dependent control flow differs
                return
            ref_in, ref_out = calls[i]
            got_in = [_host32(t) for t in _floats(inputs)]
            for r, g in zip(ref_out, (_host32(t) for t in _floats(output))):
                self.outs.setdefault(name, _Drift()).add(r, g)
            for r, g in zip(ref_in, got_in):
                self.ins.setdefault(name, _Drift()).add(r, g)
            self.absmax[name] = max([self.absmax.get(name, 0.0)] + [float(g.abs().max()) for g in got_in if g.numel()])
        return hook

    def choose(self) -> None:
        """Layers to compare: the model, leaves that ran, and modules computing outside their
        children (a child that never ran, like MultiheadAttention's out_proj); identities skipped."""
        ran = set(self.kept)

        def ran_inside(child: str) -> bool:     # containers (ModuleList) run only through their items
            return any(n == child or n.startswith(child + ".") for n in ran)

        self.compared = {name for name in ran if name not in self.identity and (
            name == MODEL_LAYER or not self.children[name] or not all(ran_inside(c) for c in self.children[name]))}

    def rows(self) -> list[dict]:
        rows = []
        for name in sorted(self.outs, key=self.order.get):
            d, di = self.outs[name], self.ins.get(name)
            in_rel = di.rel_mean if di is not None else 0.0
            rows.append({"order": self.order[name], "layer": name, "type": self.types[name],
                         "calls": len(self.kept[name]), "numel": d.numel, "rel_error_mean": d.rel_mean,
                         "rel_error_max": d.rel_max, "input_rel_error_mean": in_rel,
                         "input_absmax": self.absmax.get(name, 0.0), "introduced": d.rel_mean > 2 * in_rel})
        return rows


@dataclass
class Numerics:
    """Per-layer drift and what to do about the layers past the threshold."""

    reference: str                     # what neuron was compared against
    compared: str                      # how neuron ran
    threshold: float
    layers: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(LAYER_COLUMNS)))
    skipped: str = ""                  # why no layer was compared (timing-only: no values)

    @property
    def flagged(self) -> list[str]:
        return list(self.layers.loc[self.layers["flagged"], "layer"]) if len(self.layers) else []

    @property
    def drift_origins(self) -> list[str]:
        """Flagged layers whose own drift is at least twice their inputs': where to act."""
        frame = self.layers
        return list(frame.loc[frame["flagged"] & frame["introduced"], "layer"]) if len(frame) else []

    @property
    def worst_layers(self) -> list[str]:
        """Up to five layers with the largest mean drift, worst first (the model output excluded)."""
        inner = self.layers[self.layers["layer"] != MODEL_LAYER]
        return list(inner.sort_values("rel_error_mean", ascending=False)["layer"].head(5))

    @property
    def max_rel_error(self) -> float:
        return float(self.layers["rel_error_max"].max()) if len(self.layers) else 0.0

    @property
    def mean_rel_error(self) -> float:
        """Mean over layers of each layer's mean relative error."""
        return float(self.layers["rel_error_mean"].mean()) if len(self.layers) else 0.0

    @property
    def output_rel_error(self) -> float:
        row = self.layers[self.layers["layer"] == MODEL_LAYER]
        return float(row["rel_error_mean"].iloc[0]) if len(row) else 0.0


def _suggestion(row: dict, user_dtype: torch.dtype, first_flagged: str | None) -> str:
    if not row["introduced"]:
        return f"drift inherited from upstream (starts at {first_flagged})" if first_flagged else \
            "drift inherited from this layer's inputs"
    if user_dtype in (torch.bfloat16, torch.float16):
        text = f"this layer loses precision in {str(user_dtype)[6:]}: run it in fp32 (.float()) or normalise its inputs"
    else:
        text = ("bf16 auto-cast of this layer's matmul inputs loses precision: keep this layer in fp32 "
                "(--auto-cast none) or normalise its inputs")
    if row["input_absmax"] > LARGE_INPUT:
        text += f" (inputs reach |x| = {row['input_absmax']:.3g})"
    return text


def not_compared(threshold: float = DEFAULT_DRIFT_THRESHOLD) -> Numerics:
    """Numerics of a timing-only report: there are no values to compare."""
    return Numerics(reference="nothing", compared="nothing", threshold=positive("threshold", threshold),
                    skipped="not compared: timing-only mode computes no values")


def layer_drift(model: torch.nn.Module, args, kwargs, *, threshold: float = DEFAULT_DRIFT_THRESHOLD,
                seed: int = 0) -> Numerics:
    """Compare every layer's outputs on ``neuron`` (hardware numerics) with CPU fp32."""
    threshold = positive("threshold", threshold)
    user_dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    low = user_dtype in (torch.bfloat16, torch.float16)
    ref_model = replica(model, "cpu", torch.float32).eval()
    dev_model = replica(model, "neuron").eval()
    ref_inputs = to_device((args, kwargs), "cpu", torch.float32)
    dev_inputs = to_device((args, kwargs), "neuron", user_dtype if low else None)

    hooks = _LayerHooks(ref_model, dev_model)
    with torch.no_grad(), torch.random.fork_rng(devices=[]), _no_fastpath():
        torch.manual_seed(seed)
        with torch.device("cpu"):
            ref_model(*ref_inputs[0], **ref_inputs[1])
        hooks.choose()
        torch.manual_seed(seed)
        with torch.neuron.hardware_numerics(not low), torch.device("neuron"):
            dev_model(*dev_inputs[0], **dev_inputs[1])

    rows = hooks.rows()
    for r in rows:
        r["flagged"] = r["rel_error_mean"] > threshold
    inner = [r for r in rows if r["layer"] != MODEL_LAYER]
    for r in rows:
        if r["layer"] == MODEL_LAYER and inner:
            # the model's own input is exact; compare its output with its layers' drift instead
            r["introduced"] = r["rel_error_mean"] > 2 * max(x["rel_error_mean"] for x in inner)
    first = next((r["layer"] for r in rows if r["flagged"] and r["introduced"] and r["layer"] != MODEL_LAYER), None)
    for r in rows:
        r["suggestion"] = _suggestion(r, user_dtype, first) if r["flagged"] else ""
    frame = pd.DataFrame(rows, columns=list(LAYER_COLUMNS))
    compared = (f"neuron in {str(user_dtype)[6:]}" if low
                else "neuron with hardware numerics (fp32 matmul inputs rounded to bf16, fp32 accumulation)")
    log.debug("numerics: %d layers compared, %d flagged", len(frame), int(frame["flagged"].sum()))
    return Numerics(reference="cpu float32", compared=compared, threshold=threshold, layers=frame)
