"""Error bands: how far a simulated time moves when the model's assumptions move within reason.

Every modelling constant with a plausible range -- the registry in ``backend.sim.assumptions``
and the preset fields labelled ``ASSUMPTION`` -- is a :class:`Knob`. :func:`time_band` re-runs a
workload (any ``run(target) -> ns``: an op stream, a kernel, a trace replay) with each knob at its
range ends, one at a time, then with every knob at the end that made the run slower (the high
end of the band) and at the end that made it faster (the low end). The band is the widest of
those; the one-at-a-time swings say which assumptions dominate. A workload costs
``2 * knobs + 3`` runs, so bands are computed on request, not by default.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import backend.sim.assumptions as assumptions
from backend.sim.presets import NeuronConfig, get_target
from backend.sim.spec import HardwareConfig

__all__ = ["Knob", "Effect", "TimeBand", "knobs_for", "time_band", "format_ns"]

PRESET = "preset:"          # knob names of preset fields carry this prefix


@dataclass(frozen=True)
class Knob:
    """One assumption a band varies: a registry name, or ``preset:<field>`` of the target."""

    name: str
    default: float
    low: float
    high: float

    @property
    def is_preset(self) -> bool:
        return self.name.startswith(PRESET)


def knobs_for(target: HardwareConfig) -> list[Knob]:
    """Every assumption with a range: the registry's (NeuronCore model constants, so for
    NeuronCore targets only), then the target's labelled preset fields."""
    found = ([Knob(a.name, a.value, *a.plausible) for a in assumptions.registered() if a.plausible]
             if target.kind == "neuron" else [])
    for f in type(target).spec_fields():
        info = target.info(f.name)
        if info.is_assumption and info.plausible is not None:
            found.append(Knob(PRESET + f.name, info.value, *info.plausible))
    return found


@dataclass(frozen=True)
class Effect:
    """Time at one knob's low and high range ends, the others at their defaults."""

    knob: Knob
    at_low_ns: float
    at_high_ns: float

    @property
    def swing_ns(self) -> float:
        return abs(self.at_high_ns - self.at_low_ns)

    @property
    def slow_end(self) -> float:
        """The knob value that made the run slower (the default end when neither moved it)."""
        return self.knob.high if self.at_high_ns >= self.at_low_ns else self.knob.low

    @property
    def fast_end(self) -> float:
        return self.knob.low if self.at_high_ns >= self.at_low_ns else self.knob.high


@dataclass(frozen=True)
class TimeBand:
    """A simulated time with its band: ``str(band)`` reads ``"7.1 ms (6.2-8.3)"``."""

    nominal_ns: float
    low_ns: float
    high_ns: float
    effects: tuple[Effect, ...] = field(default=())      # largest swing first

    def dominant(self, n: int = 3) -> tuple[Effect, ...]:
        """The ``n`` assumptions that move this time most (those that move it at all)."""
        return tuple(e for e in self.effects[:n] if e.swing_ns > 0)

    def __str__(self) -> str:
        unit, scale = _unit(self.nominal_ns)
        return (f"{self.nominal_ns / scale:.3g} {unit} "
                f"({self.low_ns / scale:.3g}-{self.high_ns / scale:.3g})")

    def to_records(self) -> list[dict]:
        """One dict per knob: name, range, times at its ends, swing (for pandas)."""
        return [{"assumption": e.knob.name, "default": e.knob.default, "low": e.knob.low, "high": e.knob.high,
                 "time_at_low_ns": e.at_low_ns, "time_at_high_ns": e.at_high_ns, "swing_ns": e.swing_ns}
                for e in self.effects]


def _unit(ns: float) -> tuple[str, float]:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return unit, scale
    return "ns", 1.0


def format_ns(ns: float) -> str:
    """``7.1e6`` -> ``"7.1 ms"``."""
    unit, scale = _unit(ns)
    return f"{ns / scale:.4g} {unit}"


def _run_at(run: Callable[[NeuronConfig], float], target: NeuronConfig, values: Mapping[str, float]) -> float:
    preset = {k.removeprefix(PRESET): v for k, v in values.items() if k.startswith(PRESET)}
    registry = {k: v for k, v in values.items() if not k.startswith(PRESET)}
    moved = target.derive(**{k: type(getattr(target, k))(v) for k, v in preset.items()}) if preset else target
    with assumptions.overridden(registry):
        return float(run(moved))


def time_band(run: Callable[[NeuronConfig], float], target: str | HardwareConfig | None = None,
              knobs: Iterable[Knob] | None = None) -> TimeBand:
    """The band of ``run(target)`` (ns) over the knobs' ranges (default: :func:`knobs_for`).

    ``target`` is any preset: a NeuronCore by default, a GPU or TPU config the same way."""
    t = get_target(target)
    knobs = list(knobs_for(t) if knobs is None else knobs)
    nominal = _run_at(run, t, {})
    effects = [Effect(k, _run_at(run, t, {k.name: k.low}), _run_at(run, t, {k.name: k.high})) for k in knobs]
    moving = [e for e in effects if e.swing_ns > 0]
    slow = _run_at(run, t, {e.knob.name: e.slow_end for e in moving}) if moving else nominal
    fast = _run_at(run, t, {e.knob.name: e.fast_end for e in moving}) if moving else nominal
    times = [nominal, slow, fast, *(x for e in effects for x in (e.at_low_ns, e.at_high_ns))]
    ranked = tuple(sorted(effects, key=lambda e: (-e.swing_ns, e.knob.name)))
    return TimeBand(nominal, min(times), max(times), ranked)
