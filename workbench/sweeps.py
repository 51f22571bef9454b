"""What-if grids in parallel on Ray: ``wb.sweep(fn_or_model, grid) -> DataFrame``.

    frame = wb.sweep(train_step, grid={"target": ["trn2", "h100"], "chips": [1, 8, 64],
                                       "parallelism": ["ddp"], "batch": [8]})

Each grid point (one combination of the grid's values) is one Ray task. The task makes its
process rank 0 of a fake world of ``chips`` ranks (``workbench.distributed.fake_world``, the
topology named after the target), profiles one step on the target's simulated device and
returns one row: the point's values, the simulated step time, its compute / communication /
exposed-communication breakdown and the rank's peak HBM. Ray runs locally on ``num_cpus``
workers by default, on a cluster when ``address`` is given; ``ray`` comes with the ``sweep``
extra (``pip install neuron-workbench[sweep]``).

``fn_or_model`` is either ``fn(**point)`` (it builds and runs the step itself: any keys of the
grid reach it) or an ``nn.Module`` trained on ``inputs(batch)`` (``batch`` per rank), wrapped in
``DistributedDataParallel`` when ``parallelism`` is ``"ddp"`` (``"none"`` leaves it alone); a
model's profile is its second step, as DDP builds its buckets in the first.
"""
from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence

import torch.distributed as dist
from torch import nn

__all__ = ["sweep", "grid_points", "run_point", "POINT_DEFAULTS", "RESULT_COLUMNS", "SWEEP_COLUMNS"]

log = logging.getLogger(__name__)

# What a grid point means when the grid leaves a key out.
POINT_DEFAULTS = {"target": "trn2", "chips": 1, "parallelism": "ddp", "batch": 1}
# Summary fields (seconds or bytes) each row reports, under these column names.
RESULT_COLUMNS = {"step_time_s": "total_time", "compute_time_s": "compute_time",
                  "communication_time_s": "communication_time",
                  "exposed_communication_time_s": "exposed_communication_time"}
SWEEP_COLUMNS = tuple(RESULT_COLUMNS)      # the measured columns of a sweep's DataFrame (public: wb.SWEEP_COLUMNS)
_PARALLELISMS = ("ddp", "none")


def grid_points(grid: Mapping[str, Sequence]) -> list[dict]:
    """Every combination of the grid's values, in the grid's key order (the last key varies fastest)."""
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"sweep(): grid[{key!r}] must be a non-empty list of values, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _device_of(target: str) -> str:
    from backend.sim.presets import get_target
    return {"gpu": "cuda"}.get(get_target(target).kind, "neuron")


def _training_step(model: nn.Module, inputs: Callable, point: dict, ddp_options: dict | None) -> Callable:
    """The point's replica of ``model`` and a function running one training step of it, after one
    warm-up step (DDP builds its gradient buckets in the first): the profile sees a steady step."""
    if point["parallelism"] not in _PARALLELISMS:
        raise ValueError(f"sweep(): a model runs with parallelism in {_PARALLELISMS}, got "
                         f"{point['parallelism']!r}; pass a function to sweep other plans")
    device = _device_of(point["target"])
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

    point = {**POINT_DEFAULTS, **point}
    device = _device_of(point["target"])
    if isinstance(fn_or_model, nn.Module) and inputs is None:
        raise ValueError("sweep(): a model needs inputs=, a function batch -> input tensor")
    fake_world(int(point["chips"]), topology=point.get("topology", point["target"]))
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


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise ImportError("wb.sweep() runs on Ray, which is not installed: pip install "
                          "'neuron-workbench[sweep]' (the sweep extra)") from exc
    return ray


def sweep(fn_or_model, grid: Mapping[str, Sequence], *, inputs: Callable | None = None,
          ddp_options: dict | None = None, address: str | None = None, num_cpus: int = 2,
          parallel: bool = True, progress: bool = True):
    """Run every point of ``grid`` (target x chips x parallelism x batch, or any keys ``fn``
    takes) as a Ray task and return a DataFrame, one row per point in grid order.

    ``ddp_options``: keyword arguments of ``DistributedDataParallel`` for a model (``bucket_cap_mb``).
    ``address``: a Ray cluster (``"ray://head:10001"`` or ``"auto"``); by default a local Ray
    with ``num_cpus`` workers is started (and shut down afterwards). An already initialised Ray
    is used as it is. ``parallel=False`` runs the points one after another in this process
    instead (no Ray: a small grid finishes before a local Ray would have started). ``progress``
    shows a tqdm bar as points finish.
    """
    import pandas as pd

    points = grid_points(grid)
    if not parallel:
        bar = _progress_bar(len(points), progress)
        rows = []
        for point in points:
            rows.append(run_point(fn_or_model, point, inputs, ddp_options))
            bar.update(1)
        bar.close()
        return pd.DataFrame.from_records(rows)
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        if address is None:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    try:
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
    finally:
        if started_here:
            ray.shutdown()
    return pd.DataFrame.from_records(rows)


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="sweep", unit="point", disable=not enabled)

