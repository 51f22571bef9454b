"""``fit_chips``: the smallest number of chips a training step fits on, and its step time there.

Each candidate world size (powers of two) runs one training step as rank 0 of a fake world
(``workbench.distributed.fake_world``) in timing-only mode, so a model of any size runs on the
host without its values; the device's HBM books decide whether it fits. Plans:

- ``"fsdp"`` (ZeRO-3 / FSDP2-style): every parameter lives as a 1/N flat shard with its gradient
  and AdamW state; a module's parameters are all-gathered before its forward, dropped after it,
  gathered again when backward needs them (saved-tensor hooks), and their gradients
  reduce-scattered into the shard as they are produced;
- ``"ddp"``: full replicas, gradients all-reduced as they are produced.

With tensor or pipeline parallelism (``tp`` / ``pp`` > 1, or several ``microbatches``) the
search runs over TP x PP x DP plans instead: the model is measured once on one core and each plan
is accounted for and timed by ``workbench.parallel_plans`` (stages joined through their sends and
receives); the smallest job that fits wins, the fastest of equal size first.

Ranks are the target's simulated NeuronCores; chips = ranks / cores per chip. Collectives are
priced on the target's instance topology seen per core (``backend.sim.topology.per_core``).
"""
from __future__ import annotations

import gc
import logging
import weakref
from dataclasses import dataclass

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_leaves

from backend.lowering.collectives import priced_on
from backend.sim.checks import positive_int
from backend.sim.presets import get_target
from backend.sim.logical_cores import physical_name
from backend.sim.topology import DEFAULT_TOPOLOGY, get_topology, per_core
from workbench.parallel_plans import ModelCosts, ParallelPlan, evaluate_plan

__all__ = ["fit_chips", "ChipFit", "PLANS", "measure_model"]

log = logging.getLogger(__name__)

PLANS = ("fsdp", "ddp")
_PLAN_COLUMNS = ("tp", "pp", "dp", "microbatches", "schedule")


@dataclass(repr=False)
class ChipFit:
    """What ``fit_chips`` tried: one row per world size, the first that fits last."""

    target: str
    plan: str
    hbm_bytes: int
    cores_per_chip: int
    tried: pd.DataFrame         # ranks, chips, fits, peak_hbm_bytes, step_time_ns, error

    def _fit(self):
        fits = self.tried[self.tried["fits"]]
        return fits.iloc[0] if len(fits) else None

    @property
    def chips(self) -> int | None:
        row = self._fit()
        return None if row is None else int(row["chips"])

    @property
    def ranks(self) -> int | None:
        row = self._fit()
        return None if row is None else int(row["ranks"])

    @property
    def step_time_ns(self) -> float | None:
        row = self._fit()
        return None if row is None else float(row["step_time_ns"])

    @property
    def layout(self) -> dict | None:
        """The fitting plan's ``tp``, ``pp``, ``dp``, ``microbatches`` and ``schedule`` (None
        when nothing fits or the search ran over DP alone)."""
        row = self._fit()
        if row is None or "tp" not in row:
            return None
        return {k: (row[k] if k == "schedule" else int(row[k])) for k in _PLAN_COLUMNS}

    def __repr__(self) -> str:
        if self.chips is None:
            return (f"ChipFit({self.plan} on {self.target}: does not fit in {int(self.tried['ranks'].max())} "
                    f"ranks of {_gib(self.hbm_bytes)} HBM)")
        layout = self.layout
        shape = f" ({', '.join(f'{k}={v}' for k, v in layout.items())})" if layout else ""
        return (f"ChipFit({self.plan} on {self.target}: {self.chips} chip(s) = {self.ranks} rank(s){shape} of "
                f"{_gib(self.hbm_bytes)} HBM, step {self.step_time_ns / 1e6:.3f} ms)")


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _topology_for(target_name: str) -> str:
    try:
        return get_topology(physical_name(target_name.rstrip("*"))).name
    except ValueError:
        return DEFAULT_TOPOLOGY


class _ShardedParameters:
    """The model's parameters as per-rank flat shards, gathered around each module's use."""

    def __init__(self, model: torch.nn.Module, world: int, plan: str):
        self.world, self.plan = world, plan
        self.units: dict = {}               # module -> {name: (shard, shape, numel)}
        self.gathered: dict = {}            # id(full) -> (weakref to full, shard, numel)
        for module in model.modules():
            own = {n: p for n, p in module._parameters.items() if p is not None}
            for name, p in own.items():
                per_rank = -(-p.numel() // world) if plan == "fsdp" else p.numel()
                shard = torch.empty(per_rank, dtype=p.dtype, device="neuron", requires_grad=True)
                del module._parameters[name]
                self.units.setdefault(module, {})[name] = (shard, p.shape, p.numel())
            for name, b in module._buffers.items():
                if b is not None:
                    module._buffers[name] = torch.empty_like(b, device="neuron")
            if own:
                module.register_forward_pre_hook(self._gather_unit)
                module.register_forward_hook(self._drop_unit)

    @property
    def shards(self) -> list:
        return [s for params in self.units.values() for s, _, _ in params.values()]

    def _full(self, shard: torch.Tensor) -> torch.Tensor:
        if self.plan != "fsdp" or self.world == 1:
            return shard.detach()
        full = torch.empty(self.world * shard.numel(), dtype=shard.dtype, device=shard.device)
        dist.all_gather_single(full, shard.detach())
        return full

    def _gather_unit(self, module, _args):
        for name, (shard, shape, numel) in self.units[module].items():
            setattr(module, name, _Gather.apply(shard, self, shape, numel))

    def _drop_unit(self, module, _args, _output):
        for name in self.units[module]:
            setattr(module, name, None)       # only autograd's saved tensors still hold them

    def remember(self, full: torch.Tensor, param: torch.Tensor, shard: torch.Tensor) -> None:
        for t in (full, param):
            self.gathered[id(t)] = (weakref.ref(t), shard)

    def reduce(self, grad: torch.Tensor, shard: torch.Tensor) -> torch.Tensor:
        """A parameter's full gradient -> this rank's shard of the gradient summed over the world."""
        grad = grad.reshape(-1)
        if self.world == 1:
            return grad
        if self.plan == "ddp":
            dist.all_reduce(grad)
            return grad
        pad = self.world * shard.numel() - grad.numel()
        if pad:
            grad = torch.cat([grad, grad.new_zeros(pad)])
        out = torch.empty_like(shard)
        dist.reduce_scatter_single(out, grad)
        return out

    # Saved tensors of a gathered parameter are dropped and gathered again in backward, as FSDP does.
    def pack(self, t: torch.Tensor):
        if self.plan != "fsdp" or self.world == 1:
            return t
        for candidate in (t, t._base if t._is_view() else None):
            entry = self.gathered.get(id(candidate)) if candidate is not None else None
            if entry is not None and entry[0]() is candidate:
                return entry[1], t.size(), t.stride(), t.storage_offset()
        return t

    def unpack(self, saved):
        if isinstance(saved, torch.Tensor):
            return saved
        shard, size, stride, offset = saved
        return self._full(shard).as_strided(size, stride, offset)


class _Gather(torch.autograd.Function):
    """shard -> the full parameter (all-gathered under FSDP); backward: the gradient reduced back
    into the shard. Autograd keeps only the shard, so the full parameter dies with its last use."""

    @staticmethod
    def forward(ctx, shard, owner, shape, numel):
        ctx.owner, ctx.shard = owner, shard
        full = owner._full(shard)
        param = full[:numel].view(shape)
        owner.remember(full, param, shard)
        return param

    @staticmethod
    def backward(ctx, grad):
        return ctx.owner.reduce(grad, ctx.shard), None, None, None


def _arguments(inputs) -> tuple[list, dict]:
    """One micro-batch on the device: a tensor, a tuple of arguments, or a dict of keyword ones."""
    def on_device(a):
        return a.to("neuron") if isinstance(a, torch.Tensor) else a
    if isinstance(inputs, dict):
        return [], {k: on_device(v) for k, v in inputs.items()}
    return [on_device(a) for a in (inputs if isinstance(inputs, (tuple, list)) else (inputs,))], {}


def _loss(out, loss_fn):
    """``loss_fn(out)``, by default the mean of the (first) output."""
    return loss_fn(out) if loss_fn is not None else (out[0] if isinstance(out, (tuple, list)) else out).float().mean()


def _step(model_fn, inputs, world: int, plan: str, loss_fn) -> int:
    """One training step on rank 0; returns the peak HBM it allocated."""
    with torch.device("meta"):
        model = model_fn()
    params = _ShardedParameters(model, world, plan)
    args, kwargs = _arguments(inputs)
    optimizer = torch.optim.AdamW(params.shards)
    with torch.autograd.graph.saved_tensors_hooks(params.pack, params.unpack):
        loss = _loss(model(*args, **kwargs), loss_fn)
    loss.backward()
    optimizer.step()
    return torch.neuron.max_memory_allocated()


def fit_chips(model_fn, inputs, target: str = "trn2", plan: str = "fsdp", *, hbm_bytes: int | None = None,
              max_chips: int = 1024, loss_fn=None, tp=1, pp=1, microbatches: int = 1,
              schedule: str = "1f1b") -> ChipFit:
    """The smallest number of ``target`` chips on which one training step of ``model_fn()`` fits
    under ``plan``, and its simulated step time there (rank 0's, collectives included).

    ``model_fn``: builds the model (called under ``torch.device("meta")``, so nothing is
    allocated on the host); ``inputs``: one rank's micro-batch (a tensor or a tuple of
    arguments, or a dict of keyword arguments); ``hbm_bytes``: a what-if HBM per NeuronCore; ``loss_fn``: output -> scalar
    (default: the mean of the output). ``tp`` / ``pp``: tensor- and pipeline-parallel degrees to
    search (a number or a list), ``microbatches`` per step and ``schedule`` ("1f1b" or "gpipe"):
    with any of them beyond 1, ``plan`` names the DP flavour of TP x PP x DP plans (see above).
    """
    if plan not in PLANS:
        raise ValueError(f"unknown plan {plan!r}; known: {', '.join(PLANS)}")
    tps, pps = _degrees("tp", tp), _degrees("pp", pp)
    if tps != [1] or pps != [1] or positive_int("microbatches", microbatches) > 1:
        return _fit_plans(model_fn, inputs, target, plan, hbm_bytes, max_chips, loss_fn, tps, pps, microbatches,
                          schedule)
    from backend.lowering.timeline import replay
    from workbench.distributed import fake_world
    from workbench.session import profile

    cfg = _target_config(target, hbm_bytes)
    chip_topology = _topology_for(cfg.name)
    core_topology = per_core(chip_topology, cfg)
    rows, ranks = [], 1
    while ranks <= max_chips * cfg.cores_per_chip:
        row = {"ranks": ranks, "chips": -(-ranks // cfg.cores_per_chip), "fits": False, "peak_hbm_bytes": None,
               "step_time_ns": None, "error": ""}
        fake_world(ranks, topology=chip_topology)
        try:
            with profile(target=cfg, source=False, timing_only=True) as prof:
                torch.neuron.reset_peak_memory_stats()
                row["peak_hbm_bytes"] = _step(model_fn, inputs, ranks, plan, loss_fn)
            row["fits"] = True
            row["step_time_ns"] = replay(priced_on(prof.workload, core_topology), cfg)
        except torch.OutOfMemoryError as exc:
            row["error"] = str(exc)
        finally:
            dist.destroy_process_group()
            gc.collect()           # the step's hooks hold its model in cycles: free its HBM before the next
        rows.append(row)
        log.info("fit_chips %s on %s: %d rank(s) %s", plan, cfg.name, ranks, "fits" if row["fits"] else "does not fit")
        if row["fits"]:
            break
        ranks *= 2
    return ChipFit(cfg.name, plan, cfg.hbm_bytes, cfg.cores_per_chip, pd.DataFrame(rows))


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The longest run of same-type children of a ModuleList or Sequential: the layers."""
    best: list = []
    for module in model.modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            children = list(module.children())
            if len(children) > len(best) and len({type(c) for c in children}) == 1:
                best = children
    return best


def _nbytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def measure_model(model_fn, inputs, target, loss_fn=None) -> ModelCosts:
    """Run one micro-batch (``inputs``, as ``fit_chips`` takes them) forward and backward,
    timing-only, on ``target`` with room for the whole model (its HBM is not the question here);
    everything it allocated is freed before it returns."""
    with torch.device("meta"):
        model = model_fn()
    params = list(model.parameters())
    parameters = sum(p.numel() for p in params)
    parameter_bytes = sum(p.numel() * p.element_size() for p in params)
    blocks = _blocks(model)
    boundary: list[int] = []
    if blocks:
        blocks[0].register_forward_hook(lambda m, a, out: boundary.append(_nbytes(out)))
    block_count = len(blocks)
    del params, blocks
    try:
        saved, forward_ns, backward_ns, out_bytes = _one_microbatch(model, inputs, target, loss_fn)
    finally:
        del model
        gc.collect()           # the parameters' hooks hold the model in cycles: free its HBM now
    return ModelCosts(target.name, parameters, parameter_bytes, saved, forward_ns, backward_ns,
                      boundary[0] if boundary else out_bytes, block_count)


def _one_microbatch(model, inputs, target, loss_fn) -> tuple[int, float, float, int]:
    """Bytes saved for backward, forward and backward ns, output bytes of one micro-batch."""
    from workbench.session import profile

    roomy = target.derive(hbm_bytes=max(target.hbm_bytes, 1 << 50))
    with profile(target=roomy, source=False, timing_only=True):     # the core the parts below run on
        _ShardedParameters(model, 1, "ddp")
        args, kwargs = _arguments(inputs)
        before = torch.neuron.memory_allocated()
        with profile(target=roomy, source=False) as forward:
            out = model(*args, **kwargs)
            loss = _loss(out, loss_fn)
        saved = torch.neuron.memory_allocated() - before - _nbytes(out) - _nbytes(loss)
        with profile(target=roomy, source=False) as backward:
            loss.backward()
    return max(0, saved), forward.summary["total_time_ns"], backward.summary["total_time_ns"], _nbytes(out)


def _degrees(name: str, value) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple, range)) else [value]
    if not values:
        raise ValueError(f"Invalid {name}: give a degree or a non-empty list of degrees")
    return sorted({positive_int(f"{name} degree", v) for v in values})


def _target_config(target, hbm_bytes):
    cfg = get_target(target)
    return cfg if hbm_bytes is None else cfg.derive(hbm_bytes=int(hbm_bytes))


def _fit_plans(model_fn, inputs, target, plan, hbm_bytes, max_chips, loss_fn, tps, pps, microbatches,
               schedule) -> ChipFit:
    """The TP x PP x DP search: every plan up to ``max_chips``, smallest first."""

    cfg = _target_config(target, hbm_bytes)
    ParallelPlan(microbatches=microbatches, schedule=schedule)          # checked before the model runs
    costs = measure_model(model_fn, inputs, cfg, loss_fn)
    topology = per_core(_topology_for(cfg.name), cfg)
    most = max_chips * cfg.cores_per_chip
    rows = []
    for t in tps:
        for p in pps:
            if costs.blocks and p > costs.blocks:
                continue                      # fewer blocks than stages
            dp = 1
            while t * p * dp <= most:
                row = evaluate_plan(costs, ParallelPlan(t, p, dp, plan == "fsdp", microbatches, schedule),
                                    cfg.hbm_bytes, topology)
                rows.append({"chips": -(-row["ranks"] // cfg.cores_per_chip), **row})
                dp *= 2
    if not rows:
        raise ValueError(f"no plan to try: pp {pps} exceeds the model's {costs.blocks} blocks or tp x pp exceeds "
                         f"{max_chips} chip(s)")
    tried = pd.DataFrame(rows).sort_values(["ranks", "step_time_ns"], kind="stable", ignore_index=True)
    return ChipFit(cfg.name, plan, cfg.hbm_bytes, cfg.cores_per_chip, tried)
