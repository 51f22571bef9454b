"""What a profiled step costs in dollars: per step, per 1M tokens (or samples), per dollar.

    prof = wb.profile(step, batch, device="tpu", target="v6e")
    wb.cost(prof, tokens_per_step=8 * 1024)            # the v6e per-chip price by default
    wb.cost(prof, "tpu-v6e", tokens_per_step=8192)     # or a named instance
    wb.cost_table({"h100": p1, "trn2": p2, "v6e": p3}, tokens_per_step=8192)

Prices, their dates and sources, the rule that charges part of an instance and user overrides
live in ``backend.sim.pricing`` (``set_price("p5.48xlarge", 55.0)``). A profile covering several
steps divides its simulated time by ``steps``.
"""
from __future__ import annotations

import pandas as pd

from backend.sim.checks import non_negative, positive, positive_int
from backend.sim.pricing import CostEstimate, estimate, more_per_dollar, price
from workbench.profiles import Profile

__all__ = ["cost", "cost_table", "more_per_dollar", "cost_columns", "COST_COLUMNS"]

# What every comparison row says about money (NaN where the target has no price, e.g. cpu).
COST_COLUMNS = ("usd_per_step", "usd_per_1m_items", "items_per_usd", "items_unit", "instance")


def cost(profile, instance: str | None = None, *, tokens_per_step: float = 1.0, steps: int = 1,
         devices: int = 1) -> CostEstimate:
    """The cost of one step of ``profile`` on ``instance`` (default: the instance holding the
    profile's target), with ``tokens_per_step`` tokens or samples per step."""
    profile = Profile.coerce(profile)
    steps = positive_int("steps", steps)
    inst = price(instance or profile.trace.target)
    return estimate(profile.trace.total_time_ns * 1e-9 / steps, tokens_per_step, inst, devices)


def cost_table(profiles, *, tokens_per_step: float = 1.0, steps: int = 1, instances=None,
               unit: str = "tokens") -> pd.DataFrame:
    """One row per profile: simulated step time, MFU and the cost columns.

    ``profiles`` is a dict label -> Profile (or a list); ``instances`` optionally maps a label to
    the instance to price it on.
    """
    positive("tokens_per_step", tokens_per_step)
    positive_int("steps", steps)             # checked before any row is priced
    items = profiles.items() if isinstance(profiles, dict) else ((None, p) for p in profiles)
    rows = []
    for label, prof in items:
        prof = Profile.coerce(prof)
        chosen = (instances or {}).get(label)
        est = cost(prof, chosen, tokens_per_step=tokens_per_step, steps=steps)
        rows.append({"label": label or f"{prof.trace.device_kind} {prof.trace.target}",
                     "device_kind": prof.trace.device_kind, "target": prof.trace.target,
                     "mfu_percent": prof.summary["mfu_estimated_percent"], **est.to_record(),
                     f"usd_per_1m_{unit}": est.usd_per_million_items, f"{unit}_per_usd": est.items_per_usd})
    return pd.DataFrame(rows)


def cost_columns(step_time_s: float, target: str | None, items_per_step: float | None = None,
                 unit: str = "tokens") -> dict:
    """The :data:`COST_COLUMNS` of one comparison row: a step of ``step_time_s`` on one device of
    the instance holding ``target``; ``items_per_step`` tokens (or samples: ``unit``) per step, or
    None to count steps (then "per 1M" is per million steps). A step of no time (an empty cell)
    has NaN costs."""
    step_time_s = non_negative("step_time_s", step_time_s)
    items, unit = (positive("items_per_step", items_per_step), unit) if items_per_step is not None else (1.0, "steps")
    nan = float("nan")
    try:
        inst = price(target) if target else None
    except ValueError:          # no instance holds this target (a derived preset, cpu)
        inst = None
    if inst is None or step_time_s == 0:
        return {"usd_per_step": nan, "usd_per_1m_items": nan, "items_per_usd": nan, "items_unit": unit,
                "instance": inst.name if inst else ""}
    est = estimate(step_time_s, items, inst)
    return {"usd_per_step": est.usd_per_step, "usd_per_1m_items": est.usd_per_million_items,
            "items_per_usd": est.items_per_usd, "items_unit": unit, "instance": est.instance}
