"""The one mechanism behind every hardware preset (NeuronCore, GPU, and kinds to come).

A preset class is a frozen dataclass deriving from :class:`HardwareConfig` whose hardware fields
are declared with :func:`spec`: each carries its unit, a help text and where its value comes
from -- a citation (shared/hardware.md and the pages it names) or an ``ASSUMPTION`` with the
range a plausible value lies in. A preset may cite a different source per field
(:meth:`HardwareConfig.cited`); what-ifs (:meth:`HardwareConfig.derive`) record their changes.
Users ask ``config.explain("sbuf_bytes")`` or ``print(config.table())``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Mapping

__all__ = ["ASSUMPTION", "spec", "check_plausible", "FieldInfo", "HardwareConfig", "format_quantity"]

ASSUMPTION = "ASSUMPTION"


def spec(default: Any = MISSING, *, unit: str, source: str, help: str,
         plausible: tuple[float, float] | None = None) -> Any:
    """A preset field: its unit (``""`` for labels and flags), where its default comes from, and
    what it means. A ``source`` starting with ``ASSUMPTION`` must give a ``plausible`` range."""
    if source.startswith(ASSUMPTION) and plausible is None:
        raise TypeError(f"an {ASSUMPTION} needs a plausible (low, high) range: {source!r}")
    metadata = {"unit": unit, "source": source, "help": help, "plausible": plausible}
    return field(default=default, metadata=metadata)


def check_plausible(what: str, value: float, source: str, plausible: tuple[float, float] | None) -> None:
    """Raise unless an ``ASSUMPTION`` (by its ``source``) has a plausible range that holds ``value``;
    cited values pass."""
    if not source.startswith(ASSUMPTION):
        return
    if plausible is None:
        raise TypeError(f"{what}: an {ASSUMPTION} needs a plausible (low, high) range")
    low, high = plausible
    if not low <= value <= high:
        raise ValueError(f"{what} = {value} lies outside its plausible range {plausible}")


@dataclass(frozen=True)
class FieldInfo:
    """One row of :meth:`HardwareConfig.table`."""

    name: str
    value: Any
    unit: str
    source: str
    help: str
    plausible: tuple[float, float] | None

    @property
    def is_assumption(self) -> bool:
        return self.source.startswith(ASSUMPTION)


_DECIMAL = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((2 ** 30, "Gi"), (2 ** 20, "Mi"), (2 ** 10, "Ki"))


def format_quantity(value: Any, unit: str) -> str:
    """``29360128, "B"`` -> ``"28 MiB"``; ``2.4e9, "Hz"`` -> ``"2.4 GHz"``; other units as is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not unit:
        return str(value)
    if unit.split("/")[0] in ("Hz", "B", "FLOP"):
        # Sizes that are whole binary multiples read as such (28 MiB); vendors' decimal ones (80 GB) too.
        binary = next(((scale, prefix) for scale, prefix in _BINARY if abs(value) >= scale), None)
        if unit == "B" and binary and value % binary[0] == 0:
            return f"{value / binary[0]:.4g} {binary[1]}{unit}"
        for scale, prefix in _DECIMAL:
            if abs(value) >= scale:
                return f"{value / scale:.4g} {prefix}{unit}"
    return f"{_number(value)} {unit}"


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.4g}"


@dataclass(frozen=True)
class HardwareConfig:
    """Base of every preset class: field metadata, explanations, tables and what-ifs."""

    kind: ClassVar[str] = ""
    # Per-preset sources where they differ from the field's default one (see ``cited``).
    sources: Mapping[str, str] = field(default_factory=dict, kw_only=True, repr=False,
                                       compare=False, hash=False)
    # Per-preset plausible ranges of ASSUMPTION values whose range differs from the field's.
    ranges: Mapping[str, tuple] = field(default_factory=dict, kw_only=True, repr=False,
                                        compare=False, hash=False)
    # What-if changes relative to the preset this one was derived from, as (field, value) pairs.
    changes: tuple[tuple[str, Any], ...] = field(default=(), kw_only=True, repr=False, compare=False)

    @classmethod
    def spec_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The hardware fields: everything declared with :func:`spec`."""
        return tuple(f for f in dataclasses.fields(cls) if "unit" in f.metadata)

    @classmethod
    def _spec_field(cls, name: str) -> dataclasses.Field:
        for f in cls.spec_fields():
            if f.name == name:
                return f
        raise ValueError(f"{cls.__name__} has no field {name!r}; fields: "
                         f"{', '.join(f.name for f in cls.spec_fields())}")

    @classmethod
    def cited(cls, name: str, **cited_values: tuple):
        """A preset from ``field=(value, source)`` pairs, or ``(value, source, plausible)`` for an
        ASSUMPTION whose range differs from the field's; other fields keep their defaults. Every
        ASSUMPTION value must lie in its plausible range."""
        for key, entry in cited_values.items():
            cls._spec_field(key)
            if len(entry) not in (2, 3):
                raise TypeError(f"{cls.__name__}.cited({key}=...): expected (value, source[, plausible])")
        config = cls(name=name, sources={k: entry[1] for k, entry in cited_values.items()},
                     ranges={k: tuple(entry[2]) for k, entry in cited_values.items() if len(entry) == 3},
                     **{k: entry[0] for k, entry in cited_values.items()})
        config.check_ranges()
        return config

    def check_ranges(self) -> None:
        """Raise if an ASSUMPTION lacks a range or lies outside it."""
        for f in self.spec_fields():
            row = self.info(f.name)
            check_plausible(f"{self.name}.{f.name}", row.value, row.source, row.plausible)

    def info(self, name: str) -> FieldInfo:
        f = self._spec_field(name)
        source = self.sources.get(name, f.metadata["source"])
        plausible = self.ranges.get(name, f.metadata["plausible"]) if source.startswith(ASSUMPTION) else None
        return FieldInfo(name, getattr(self, name), f.metadata["unit"], source, f.metadata["help"], plausible)

    def source(self, name: str) -> str:
        """Where this preset's value of ``name`` comes from."""
        return self.info(name).source

    def explain(self, name: str) -> str:
        """What field ``name`` means, its value with unit, and where the value comes from."""
        row = self.info(name)
        text = f"{self.name}.{name} = {format_quantity(row.value, row.unit)}: {row.help}\n  source: {row.source}"
        if row.plausible is not None:
            low, high = row.plausible
            text += f"\n  plausible: {format_quantity(low, row.unit)} .. {format_quantity(high, row.unit)}"
        return text

    def to_records(self) -> list[dict]:
        """One dict per hardware field (name, value, unit, source, help, plausible), for pandas."""
        return [dataclasses.asdict(self.info(f.name)) for f in self.spec_fields()]

    def table(self) -> str:
        """A plain-text table of every field: name, value with unit, source."""
        rows = [(r.name, format_quantity(r.value, r.unit), r.source)
                for r in map(self.info, (f.name for f in self.spec_fields()))]
        widths = [max(len(row[i]) for row in rows) for i in range(2)]
        header = f"{self.kind} preset {self.name}" + (f" (changed: {', '.join(k for k, _ in self.changes)})"
                                                     if self.changes else "")
        return "\n".join([header, *(f"{n:<{widths[0]}}  {v:>{widths[1]}}  {s}" for n, v, s in rows)])

    def derive(self, name: str | None = None, **changes: Any):
        """A what-if copy with some fields changed, e.g. ``trn2.derive(sbuf_bytes=48 * MiB)``.

        Unless ``name`` is given, the copy is called ``"<name>*"`` so its traces never pass for
        the stock part; ``changes`` accumulates what differs from the stock preset.
        """
        known = {f.name for f in self.spec_fields()}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown {type(self).__name__} fields: {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        if name is None:
            name = self.name if self.name.endswith("*") else f"{self.name}*"
        sources = {**self.sources, **{k: f"what-if change of {self.name} (was "
                                         f"{format_quantity(getattr(self, k), self.info(k).unit)})"
                                      for k in changes}}
        recorded = tuple(sorted({**dict(self.changes), **changes}.items()))
        return dataclasses.replace(self, name=name, sources=sources, changes=recorded, **changes)
