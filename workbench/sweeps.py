"""What-if grids in parallel on Ray: ``wb.sweep(fn_or_model, grid) -> DataFrame``.

    frame = wb.sweep(train_step, grid={"target": ["trn2", "h100"], "chips": [1, 8, 64],
                                       "parallelism": ["ddp"], "batch": [8]})

Each grid point (one combination of the grid's values) is one Ray task. The task makes its
process rank 0 of a fake world of ``chips`` ranks (``workbench.distributed.fake_world``, the
topology named after the target), profiles one step on the target's simulated device and
returns one row: the point's values, the simulated step time, its compute / communication /
exposed-communication breakdown and the rank's peak HBM. Ray runs locally on ``num_cpus``
workers by default (bound to loopback), on a cluster when ``address`` is given
(``workbench.ray_cluster``); ``ray`` comes with the ``sweep`` extra (``pip install
neuron-workbench[sweep]``).

``fn_or_model`` is either ``fn(**point)`` (it builds and runs the step itself: any keys of the
grid reach it) or an ``nn.Module`` trained on ``inputs(batch)`` (``batch`` per rank), wrapped in
``DistributedDataParallel`` when ``parallelism`` is ``"ddp"`` (``"none"`` leaves it alone); a
model's profile is its second step, as DDP builds its buckets in the first. A TPU target
("v6e") runs on ``neuron`` timed by the TPU model, its collectives on a slice of ``chips`` chips.
The grid is checked before anything runs: a model takes only the keys of :data:`POINT_DEFAULTS`
(and ``topology``) and of :data:`PLAN_KEYS`, a function only keys it has parameters for;
``chips``, ``batch`` and the plan degrees are whole numbers >= 1; every target is a known preset.

Plan points: a model's grid with any of ``tp``, ``pp``, ``dp``, ``microbatches`` or ``schedule``
is a grid of TP x PP x DP plans (``workbench.parallel_plans``; ``parallelism`` "ddp" or "fsdp"
is the DP flavour, ``batch`` the micro-batch per rank). The model is measured once per target
and batch on one core, each point accounted for and its pipeline joined; its chips follow from
``tp x pp x dp`` ranks (one per NeuronCore), so ``chips`` is not a key of such a grid. The row
adds ``fits``, ``bubble_fraction``, ``p2p_exposed_time_s`` and the per-rank HBM parts.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence

import torch.distributed as dist
from torch import nn

from backend.sim.checks import positive, positive_int
from workbench.ray_cluster import ray_module, ray_session

__all__ = ["sweep", "grid_points", "run_point", "POINT_DEFAULTS", "PLAN_KEYS", "RESULT_COLUMNS", "SWEEP_COLUMNS"]

log = logging.getLogger(__name__)

# What a grid point means when the grid leaves a key out.
POINT_DEFAULTS = {"target": "trn2", "chips": 1, "parallelism": "ddp", "batch": 1}
# Summary fields (seconds or bytes) each row reports, under these column names.
RESULT_COLUMNS = {"step_time_s": "total_time", "compute_time_s": "compute_time",
                  "communication_time_s": "communication_time",
                  "exposed_communication_time_s": "exposed_communication_time"}
SWEEP_COLUMNS = tuple(RESULT_COLUMNS)      # the measured columns of a sweep's DataFrame (public: wb.SWEEP_COLUMNS)
_PARALLELISMS = ("ddp", "none")
# Keys that make a model's grid point a TP x PP x DP plan, and what they mean when left out.
PLAN_KEYS = {"tp": 1, "pp": 1, "dp": 1, "microbatches": 1, "schedule": "1f1b"}
_PLAN_PARALLELISMS = ("ddp", "fsdp")


def grid_points(grid: Mapping[str, Sequence]) -> list[dict]:
    """Every combination of the grid's values, in the grid's key order (the last key varies fastest)."""
    if not grid:
        raise ValueError(f"sweep(): the grid is empty; name at least one key, e.g. {{'chips': [1, 8]}} "
                         f"(a point's other keys default to {POINT_DEFAULTS})")
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"sweep(): grid[{key!r}] must be a non-empty list of values, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _device_of(target: str) -> str:
    """The simulated device timing ``target``: "neuron", "cuda" or "tpu"."""
    from backend.sim import hardware_kinds as kinds
    from backend.sim.presets import get_target
    return kinds.kind(get_target(target).kind).device


def _topology_of(point: dict):
    """The interconnect a point's collectives are priced on: its ``topology``, else the target's
    (a TPU's: a slice of ``chips`` chips on its ICI)."""
    if "topology" in point:
        return point["topology"]
    if _device_of(point["target"]) == "tpu":
        from backend.sim.tpu import get_tpu
        from backend.sim.tpu.collectives import slice_topology
        return slice_topology(get_tpu(point["target"]), point["chips"])
    return point["target"]


_MODEL_KEYS = (*POINT_DEFAULTS, "topology", *PLAN_KEYS)


def _is_plan(point: Mapping) -> bool:
    return any(key in point for key in PLAN_KEYS)


def _check_plan(point: dict, full: dict) -> dict:
    """A plan point's keys checked, its defaults filled in and its plan built (errors name the key)."""
    from workbench.parallel_plans import ParallelPlan

    if "chips" in point:
        raise ValueError("sweep(): a plan point's chips follow from tp x pp x dp ranks (one per NeuronCore); "
                         "leave 'chips' out of a grid with tp, pp, dp, microbatches or schedule")
    if full["parallelism"] not in _PLAN_PARALLELISMS:
        raise ValueError(f"sweep(): a TP x PP x DP plan takes parallelism in {_PLAN_PARALLELISMS} (the DP "
                         f"flavour), got {full['parallelism']!r}")
    full = {**PLAN_KEYS, **full}
    for key in ("tp", "pp", "dp", "microbatches"):
        full[key] = positive_int(f"{key} in the sweep grid", full[key])
    full["plan"] = ParallelPlan(full["tp"], full["pp"], full["dp"], full["parallelism"] == "fsdp",
                                full["microbatches"], full["schedule"])       # an unknown schedule raises
    return full


def check_points(fn_or_model, points: list[dict]) -> list[dict]:
    """The points with defaults filled in, or a ValueError naming what is wrong, before any runs."""
    from backend.sim.presets import get_target

    is_model = isinstance(fn_or_model, nn.Module)
    checked = []
    for point in points:
        full = {**POINT_DEFAULTS, **point}
        if is_model:
            unknown = sorted(set(point) - set(_MODEL_KEYS))
            if unknown:
                raise ValueError(f"sweep(): unknown grid key(s) {', '.join(map(repr, unknown))} for a model; "
                                 f"known: {', '.join(_MODEL_KEYS)}")
            full["batch"] = positive_int("batch in the sweep grid", full["batch"])
            if _is_plan(point):
                if _device_of(full["target"]) != "neuron":
                    raise ValueError(f"sweep(): TP x PP x DP plan points run on NeuronCore targets, got "
                                     f"{full['target']!r}")
                checked.append(_check_plan(point, full))
                continue
            if full["parallelism"] not in _PARALLELISMS:
                raise ValueError(f"sweep(): a model runs with parallelism in {_PARALLELISMS}, got "
                                 f"{full['parallelism']!r}; pass a function to sweep other plans")
        else:
            try:
                inspect.signature(fn_or_model).bind(**full)
            except TypeError as exc:
                raise ValueError(f"sweep(): fn(**point) cannot take the point {full} ({exc}); a function gets "
                                 f"every grid key and the defaults {POINT_DEFAULTS}") from None
        full["chips"] = positive_int("chips in the sweep grid", full["chips"])
        get_target(full["target"])            # an unknown target lists the known ones
        checked.append(full)
    return checked


def _training_step(model: nn.Module, inputs: Callable, point: dict, ddp_options: dict | None) -> Callable:
    """The point's replica of ``model`` and a function running one training step of it, after one
    warm-up step (DDP builds its gradient buckets in the first): the profile sees a steady step."""
    from workbench.devices import HOST_DEVICE

    device = _device_of(point["target"])
    device = HOST_DEVICE.get(device, device)           # a TPU's model runs on neuron
    replica = copy.deepcopy(model).to(device)
    if point["parallelism"] == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        replica = DistributedDataParallel(replica, **(ddp_options or {}))
    x = inputs(point["batch"]).to(device)

    def step() -> None:
        replica(x).float().mean().backward()
    step()
    return step


def run_point(fn_or_model, point: dict, inputs: Callable | None = None, ddp_options: dict | None = None) -> dict:
    """Profile one grid point in this process (what each Ray task runs); returns its row."""
    import workbench as wb
    from workbench.distributed import fake_world

    if isinstance(fn_or_model, nn.Module) and inputs is None:
        raise ValueError("sweep(): a model needs inputs=, a function batch -> input tensor")
    point, = check_points(fn_or_model, [point])
    if "plan" in point:
        return _plan_row(fn_or_model, inputs, point)
    device = _device_of(point["target"])
    # A point's "chips" are whole chips, one rank each, as the grid's key says (fake_world's default
    # would place one rank per NeuronCore).
    fake_world(point["chips"], topology=_topology_of(point), ranks_per_chip=1)
    try:
        with wb.use_device(device, target=point["target"]):
            if isinstance(fn_or_model, nn.Module):
                step = _training_step(fn_or_model, inputs, point, ddp_options)
            else:
                step = lambda: fn_or_model(**point)     # noqa: E731
            with wb.profile(device=device, target=point["target"], source=False) as prof:
                step()
    finally:
        dist.destroy_process_group()
    summary = prof.summary
    row = dict(point)
    row.update({column: summary.get(field, float("nan")) for column, field in RESULT_COLUMNS.items()})
    row["hbm_peak_bytes_per_rank"] = prof.memory["hbm_peak_allocated_bytes"]
    return row


_MEASURED: dict = {}       # (model id, target, batch) -> ModelCosts, for the points of one process


def _plan_row(model: nn.Module, inputs: Callable, point: dict) -> dict:
    """A plan point's row: the model measured on the target's core (once per process), the plan
    accounted for and timed by ``workbench.parallel_plans``."""
    from backend.sim.presets import get_target
    from backend.sim.topology import per_core
    from workbench.fit import measure_model
    from workbench.parallel_plans import evaluate_plan

    cfg = get_target(point["target"])
    key = (id(model), cfg.name, point["batch"])
    if key not in _MEASURED:
        _MEASURED[key] = measure_model(lambda: copy.deepcopy(model).to("meta"), inputs(point["batch"]), cfg)
    topology = per_core(_topology_of(point), cfg)
    result = evaluate_plan(_MEASURED[key], point.pop("plan"), cfg.hbm_bytes, topology)
    exposed_s = (result["tp_communication_ns"] + result["dp_communication_ns"] + result["p2p_exposed_ns"]) * 1e-9
    row = {**point, "chips": -(-result["ranks"] // cfg.cores_per_chip), "ranks": result["ranks"],
           "fits": result["fits"], "step_time_s": result["step_time_ns"] * 1e-9,
           "compute_time_s": (result["pipeline_time_ns"] * (1 - result["bubble_fraction"])
                              - result["tp_communication_ns"]) * 1e-9,
           # TP's and DP's collectives and the exposed sends are all on the critical path here.
           "communication_time_s": exposed_s, "exposed_communication_time_s": exposed_s,
           "bubble_fraction": result["bubble_fraction"], "p2p_exposed_time_s": result["p2p_exposed_ns"] * 1e-9,
           "hbm_peak_bytes_per_rank": result["hbm_bytes_per_rank"]}
    row.update({k: result[k] for k in ("weights_bytes", "optimizer_bytes", "activation_bytes")})
    return row


def sweep(fn_or_model, grid: Mapping[str, Sequence], *, inputs: Callable | None = None,
          ddp_options: dict | None = None, address: str | None = None, num_cpus: int = 2,
          parallel: bool = True, progress: bool = True, connect_timeout_s: float = 10.0):
    """Run every point of ``grid`` (target x chips x parallelism x batch, or any keys ``fn``
    takes) as a Ray task and return a DataFrame, one row per point in grid order.

    ``ddp_options``: keyword arguments of ``DistributedDataParallel`` for a model (``bucket_cap_mb``).
    ``address``: a Ray cluster: ``"head:6379"`` (the GCS), ``"auto"``, or ``"ray://head:10001"``
    (Ray Client, which needs ``ray[client]``: the ``sweep`` extra installs it); an address that
    accepts no connection within ``connect_timeout_s`` raises ``ConnectionError``. A cluster
    started with token authentication (``RAY_AUTH_MODE=token``, the default from Ray 2.5x) needs
    ``RAY_AUTH_MODE=token`` and its token (``RAY_AUTH_TOKEN``) in this process's environment too.
    By default a local Ray with ``num_cpus`` workers is started, listening on 127.0.0.1 only
    (and shut down afterwards). An already initialised Ray is used as it is. ``parallel=False``
    runs the points one after another in this process instead (no Ray: a small grid finishes
    before a local Ray would have started). ``progress`` shows a tqdm bar as points finish.
    """
    import pandas as pd

    if isinstance(fn_or_model, nn.Module) and inputs is None:
        raise ValueError("sweep(): a model needs inputs=, a function batch -> input tensor")
    points = grid_points(grid)
    check_points(fn_or_model, points)            # before a Ray starts or a point runs
    num_cpus, connect_timeout_s = positive_int("num_cpus", num_cpus), positive("connect_timeout_s", connect_timeout_s)
    if not parallel:
        bar = _progress_bar(len(points), progress)
        rows = []
        for point in points:
            rows.append(run_point(fn_or_model, point, inputs, ddp_options))
            bar.update(1)
        bar.close()
        return pd.DataFrame.from_records(rows)
    ray_module()            # a missing Ray names the extra before anything else
    with ray_session(address, num_cpus, connect_timeout_s) as ray:
        task = ray.remote(run_point)
        model_ref = ray.put(fn_or_model)
        pending = {task.remote(model_ref, point, inputs, ddp_options): i for i, point in enumerate(points)}
        rows: list = [None] * len(points)
        bar = _progress_bar(len(points), progress)
        waiting = list(pending)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for ref in done:
                rows[pending[ref]] = ray.get(ref)
                bar.update(1)
        bar.close()
    return pd.DataFrame.from_records(rows)


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="sweep", unit="point", disable=not enabled)

