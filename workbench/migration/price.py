"""The headline of a migration report in dollars: how many more tokens (or samples) one dollar
buys on the target than on the baseline, with the target's timing error band when it has one."""
from __future__ import annotations

import math

from backend.sim.pricing import percent_more_per_dollar
from backend.sim.tpu import COMPILED_PATH_NOTE
from workbench.format import fmt_usd

__all__ = ["price_line", "percent_band", "timing_notes", "headline_mode"]


def headline_mode(report) -> str:
    """The mode both sides are priced in. A TPU only runs compiled graphs, so beside a TPU the
    other side's compiled step is used when one was recorded: an eager step there would price
    the difference between eager and compiled execution, not between the chips."""
    beside_tpu = "tpu" in (report.target_device, report.baseline_device)
    return "compiled" if beside_tpu and report.step("target", "compiled") is not None else "eager"


def percent_band(report) -> tuple[float, float] | None:
    """The range of "% more per dollar" over the target's timing band (``Profile.time_band()``),
    or None when the target profile has none (not computed, or not a NeuronCore)."""
    mode = headline_mode(report)
    prof, target, baseline = report.target_profile(mode), report.step("target", mode), report.step("baseline", mode)
    band = getattr(prof, "band", None) if prof is not None else None
    if band is None or target is None or baseline is None:
        return None
    # items per dollar scale as 1 / step time (the price per second is fixed)
    ends = [percent_more_per_dollar(target.items_per_usd * target.step_time_s / (t_ns * 1e-9), baseline.items_per_usd)
            for t_ns in (band.high_ns, band.low_ns)]
    return min(ends), max(ends)


def price_line(report) -> str | None:
    """``"price: 70% more tokens per dollar on trn2 than on h100 (band +55% .. +82%); ..."``, or
    None when either side has no instance price."""
    mode = headline_mode(report)
    target, baseline = report.step("target", mode), report.step("baseline", mode)
    if target is None or baseline is None:
        return None
    if any(math.isnan(r.items_per_usd) for r in (target, baseline)):
        missing = [r.target for r in (target, baseline) if math.isnan(r.items_per_usd)]
        return f"price: no instance price for {', '.join(missing)} (backend.sim.pricing.set_price adds one)"
    unit = target.items_unit
    pct = percent_more_per_dollar(target.items_per_usd, baseline.items_per_usd)
    band = percent_band(report)
    band_text = (f"band {band[0]:+.0f}% .. {band[1]:+.0f}% from {report.target}'s timing error band" if band
                 else "no error band: migration_report(..., band=True) adds it")
    return (f"price: {abs(pct):.0f}% {'more' if pct >= 0 else 'fewer'} {unit} per dollar on {report.target} "
            f"than on {report.baseline} ({band_text}); {fmt_usd(target.usd_per_1m_items)} vs "
            f"{fmt_usd(baseline.usd_per_1m_items)} per 1M {unit} on {target.instance} vs {baseline.instance} "
            f"({mode} step, on-demand price per device)")


def timing_notes(report) -> list[str]:
    """What the reader must know about how a side was timed (a TPU: the compiled path)."""
    return [f"{name}: {COMPILED_PATH_NOTE}" for name, device in
            ((report.target, report.target_device), (report.baseline, report.baseline_device)) if device == "tpu"]
