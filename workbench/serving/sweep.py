"""``wb.serve_sweep``: rate x target x tp x replicas, and the cheapest configuration meeting an SLO.

    frame = wb.serve_sweep(config, {"rate_per_s": [2, 8], "target": ["trn2", "h100"], "tp": [1, 4],
                                    "replicas": [1, 2]},
                           requests={"count": 500, "prompt_tokens": (64, 1024), "output_tokens": (16, 256)},
                           slo={"ttft_s": 1.0, "tpot_s": 0.05})
    wb.serving.cheapest(frame, min_slo_attainment=0.9)     # per rate: the lowest USD per 1M tokens

Points sharing a target and tp share their iteration costs, so they run as one task (one Ray
task each, as ``wb.sweep`` runs its points; ``parallel=False`` runs them here, in order). The
load at a point is ``poisson_requests(rate_per_s, **requests)`` (the same seed at every point), or
``requests(rate_per_s)`` when ``requests`` is callable.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from backend.sim.serving import poisson_requests
from workbench.ray_cluster import ray_module, ray_session
from workbench.sweeps import _progress_bar, grid_points
from workbench.serving.service import serve

__all__ = ["serve_sweep", "cheapest", "SWEEP_KEYS"]

SWEEP_KEYS = ("rate_per_s", "target", "tp", "replicas")


def _load(requests, rate_per_s: float):
    return requests(rate_per_s) if callable(requests) else poisson_requests(rate_per_s, **requests)


def run_group(model_or_config, points: list[dict], requests, serve_options: dict) -> list[dict]:
    """Serve every point of one (target, tp) group; one summary row per point (a configuration
    the model does not fit gets a row whose ``error`` says why)."""
    rows = []
    for point in points:
        options = {**serve_options, **{k: v for k, v in point.items() if k != "rate_per_s"}}
        try:
            result = serve(model_or_config, _load(requests, point["rate_per_s"]), **options)
        except ValueError as exc:           # weights and activations leave no KV cache, tp does not divide
            rows.append({**point, "error": str(exc)})
            continue
        rows.append({**point, **result.summary, "error": ""})
    return rows


def serve_sweep(model_or_config, grid: Mapping[str, Sequence], *, requests: dict | Callable,
                slo=None, parallel: bool = True, address: str | None = None, num_cpus: int = 2,
                progress: bool = True, connect_timeout_s: float = 10.0, **serve_options) -> pd.DataFrame:
    """One row per grid point (``rate_per_s`` and any of ``target``, ``tp``, ``replicas`` and
    ``scheduler``), with ``wb.serve``'s summary; ``serve_options`` go to every ``wb.serve``.
    ``address``, ``num_cpus`` and ``connect_timeout_s`` choose the Ray cluster as ``wb.sweep``'s do."""
    if "rate_per_s" not in grid:
        raise ValueError("serve_sweep() needs grid['rate_per_s'], the request rates to load each configuration with")
    points = grid_points(grid)
    groups: dict = {}
    for i, point in enumerate(points):
        groups.setdefault((point.get("target"), point.get("tp")), []).append((i, point))
    options = {"slo": slo, **serve_options}
    rows: list = [None] * len(points)
    bar = _progress_bar(len(points), progress)

    def keep(members, found):
        for (i, _), row in zip(members, found):
            rows[i] = row
        bar.update(len(found))

    if not parallel:
        for members in groups.values():
            keep(members, run_group(model_or_config, [p for _, p in members], requests, options))
    else:
        ray_module()            # a missing Ray names the extra before anything else
        with ray_session(address, num_cpus, connect_timeout_s) as ray:
            task, model_ref = ray.remote(run_group), ray.put(model_or_config)
            pending = {task.remote(model_ref, [p for _, p in members], requests, options): members
                       for members in groups.values()}
            waiting = list(pending)
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=1)
                for ref in done:
                    keep(pending[ref], ray.get(ref))
    bar.close()
    return pd.DataFrame.from_records(rows)


def cheapest(frame: pd.DataFrame, min_slo_attainment: float = 0.9, by: str = "rate_per_s",
             metric: str = "usd_per_1m_tokens") -> pd.DataFrame:
    """Per value of ``by``, the configuration with the lowest ``metric`` (USD per 1M output tokens;
    ``"usd_per_audio_hour"`` for speech) among those whose share of requests meeting the SLO is at
    least ``min_slo_attainment`` (rates none meets: absent)."""
    served = frame[frame["error"] == ""] if "error" in frame else frame
    if served.empty:
        return served
    meeting = served[(served["slo_attainment"] >= min_slo_attainment) & (served["rejected"] == 0)]
    if meeting.empty:
        return meeting
    return meeting.loc[meeting.groupby(by)[metric].idxmin()].reset_index(drop=True)
