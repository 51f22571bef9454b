"""Running one training (or inference) step of a model for the migration report.

The report never touches the user's model: every run works on a replica (``copy.deepcopy``)
moved to the device it needs, so the CPU reference, the neuron run and the compiled run all
start from identical weights. ``record_step`` runs a warm-up step (Adam's lazy state, the
compile) and then records one steady-state step into a NeuronCore ``EagerSession`` and a GPU
``GpuSession`` at once: both cost the very same op stream.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

from backend.recording import recording
from backend.lowering import EagerSession
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target
from backend.sim.trace import Trace

__all__ = ["Step", "StepRecording", "call_args", "to_device", "replica", "batch_size", "float_dtype",
           "roomy_device", "default_loss", "record_step", "PHASES", "ROOMY_HBM_BYTES"]

log = logging.getLogger(__name__)

PHASES = ("forward", "backward", "optimizer")
# Capacity of the device books while measuring: the report decides what fits, the run must not
# stop at the first allocation that would not (host RAM is the real limit).
ROOMY_HBM_BYTES = 1 << 44


def call_args(example_inputs) -> tuple[tuple, dict]:
    """``model(*args, **kwargs)`` from a tensor, a tuple/list of arguments or a dict of kwargs."""
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def to_device(tree, device, float_dtype: torch.dtype | None = None):
    """Every tensor in ``tree`` on ``device``; floating tensors cast to ``float_dtype`` if given."""
    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        dtype = float_dtype if float_dtype is not None and t.is_floating_point() else t.dtype
        return t.detach().to(device=device, dtype=dtype)

    return tree_map(move, tree)


def replica(model: torch.nn.Module, device, float_dtype: torch.dtype | None = None) -> torch.nn.Module:
    clone = copy.deepcopy(model)
    clone.to(device)
    if float_dtype is not None:
        clone.to(float_dtype)        # Module.to(dtype) casts floating parameters only
    return clone


def batch_size(args, kwargs) -> int:
    """Dim 0 of the first tensor argument: the batch the report extrapolates from."""
    for t in tree_flatten((args, kwargs))[0]:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return int(t.shape[0])
    raise ValueError("example_inputs hold no tensor with a batch dimension")


def float_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype most floating parameter elements have (fp32 for a parameter-free model)."""
    counts: dict = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.get) if counts else torch.float32


@contextlib.contextmanager
def roomy_device(target: NeuronConfig):
    """Select ``target`` on the neuron device with room for any allocation; restore after."""
    from backend.device.neuron_module import get_target as current, set_target

    previous = current()
    set_target(dataclasses.replace(target, hbm_bytes=max(target.hbm_bytes, ROOMY_HBM_BYTES)))
    try:
        yield
    finally:
        set_target(previous)


def default_loss(output) -> torch.Tensor:
    """A surrogate loss: the mean of the first floating tensor the model returned."""
    for t in tree_flatten(output)[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.mean()
    raise ValueError("the model returned no floating tensor to train on; pass loss_fn=")


@dataclass
class Step:
    """One step of ``model``: forward (+ loss, backward and optimizer step when training)."""

    model: torch.nn.Module
    training: bool = True
    loss_fn: Callable | None = None
    optimizer: Callable | None = None
    _opt: object = field(default=None, repr=False)
    device: torch.device = field(init=False)

    def __post_init__(self):
        self.model.train(self.training)
        first = next(self.model.parameters(), None)
        # factories in forward without device= land where the model is, as under a default device
        self.device = first.device if first is not None else torch.device("cpu")
        if self.training:
            params = [p for p in self.model.parameters() if p.requires_grad]
            if not params:
                raise ValueError("training=True but the model has no parameter that requires grad")
            self._opt = (self.optimizer or torch.optim.Adam)(params)

    def run(self, args, kwargs, mark: Callable[[str], None] | None = None, call=None):
        """Run the step; ``mark(phase)`` after each phase; ``call`` replaces ``model`` (compiled)."""
        with self.device:
            return self._run(args, kwargs, mark or (lambda phase: None), self.model if call is None else call)

    def _run(self, args, kwargs, mark, fn):
        if not self.training:
            with torch.no_grad():
                out = fn(*args, **kwargs)
            mark("forward")
            return out
        out = fn(*args, **kwargs)
        loss = (self.loss_fn or default_loss)(out)
        mark("forward")
        loss.backward()
        mark("backward")
        self._opt.step()
        mark("optimizer")
        self._opt.zero_grad(set_to_none=True)
        return out


@dataclass
class StepRecording:
    """One recorded step on the target and on the baseline (same op stream)."""

    mode: str                       # "eager" or "compiled"
    neuron: Trace                   # the NeuronCore that ran the step (op coverage, breakdown)
    baseline: Trace
    phase_ends: dict                # phase -> number of neuron trace ops when it ended
    graphs: list = field(default_factory=list)   # compiled graphs (compiled mode)
    target: Trace | None = None     # the target's trace when it is not that NeuronCore (a TPU)
    workload: list | None = None    # what the NeuronCore was fed (Profile.time_band replays it)
    replays: dict = field(default_factory=dict)   # "target" / "baseline" -> config -> ns of the step there

    @property
    def target_trace(self) -> Trace:
        return self.neuron if self.target is None else self.target

    def phase_of(self, op_index: int) -> str:
        for phase in PHASES:
            if phase in self.phase_ends and op_index < self.phase_ends[phase]:
                return phase
        return PHASES[-1]


def _cost_sink(side):
    """The session costing the step for one side of the report (a CostTarget)."""
    from workbench.session import make_sink
    return make_sink(side.device, side.config)


def record_step(model: torch.nn.Module, args, kwargs, *, target, baseline, training: bool,
                loss_fn=None, optimizer=None, compiled: bool = False, runs_on=None) -> StepRecording:
    """Warm up, then record one step of a neuron replica of ``model`` on both simulators.

    ``target`` is a NeuronCore preset or a ``CostTarget`` (``runs_on``: the NeuronCore that runs
    the step then); ``baseline`` a GPU preset name or a ``CostTarget``."""
    from workbench.migration.targets import cost_target
    target, baseline = cost_target(target, "neuron"), cost_target(baseline, "cuda")
    cfg = target.config if target.device == "neuron" else get_target(runs_on or DEFAULT_NEURON_TARGET)
    net = replica(model, "neuron")
    step = Step(net, training, loss_fn, optimizer)
    call = None
    graphs_before = 0
    if compiled:
        from backend.compile import compiled_graphs, register
        register()
        graphs_before = len(compiled_graphs())
        call = torch.compile(net, backend="neuron")
    dev_args, dev_kwargs = to_device((args, kwargs), "neuron")
    step.run(dev_args, dev_kwargs, call=call)            # warm-up: optimizer state, compile
    neuron, gpu = EagerSession(cfg, keep_workload=True), _cost_sink(baseline)
    other = _cost_sink(target) if target.device != "neuron" else None
    ends: dict = {}
    with contextlib.ExitStack() as stack:
        for sink in (neuron, gpu, other):
            if sink is not None:
                stack.enter_context(recording(sink, with_source=sink is neuron))
        step.run(dev_args, dev_kwargs, mark=lambda phase: ends.setdefault(phase, len(neuron.trace.ops)), call=call)
    graphs = []
    if compiled:
        from backend.compile import compiled_graphs
        graphs = compiled_graphs()[graphs_before:]
    log.debug("recorded %s step: %d neuron ops", "compiled" if compiled else "eager", len(neuron.trace.ops))
    return StepRecording("compiled" if compiled else "eager", neuron.trace, gpu.trace, ends, graphs,
                         target=other.trace if other is not None else None, workload=neuron.workload,
                         replays={"target": (other or neuron).replay_ns, "baseline": gpu.replay_ns})
