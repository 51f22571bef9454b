"""What the simulator knows about hardware, for notebooks and scripts: presets of every kind,
what-if variants, interconnect topologies and the modelling assumptions, without importing
``backend.sim`` internals."""
from __future__ import annotations

from backend.sim import assumptions as _assumptions
from backend.sim.presets import derive, get_target, list_presets
from backend.sim.spec import HardwareConfig
from backend.sim.topology import Topology, get_topology, list_topologies

__all__ = ["targets", "target", "derive", "topology", "topologies", "assumptions", "assumption"]


def targets(kind: str | None = None) -> dict[str, HardwareConfig]:
    """The presets by name: NeuronCores (``kind="neuron"``), GPUs (``"gpu"``), TPUs (``"tpu"``) or all."""
    return list_presets(kind)


def target(name: str | HardwareConfig | None = None, kind: str | None = None) -> HardwareConfig:
    """One preset by name (``"trn2"``, ``"h100"``, ``"v6e"``, ``"trn2/lnc2"``); ``.explain(field)`` cites it."""
    return get_target(name, kind)


def topology(name: str | Topology | None = None) -> Topology:
    """An interconnect topology (``"trn2.48xlarge"``, ``"trn2-ultraserver"``, ``"dgx-h100"``, ...)."""
    return get_topology(name)


def topologies() -> dict[str, Topology]:
    return list_topologies()


def assumption(name: str) -> _assumptions.Assumption:
    """One modelling constant: its value, unit, source or plausible range, and why."""
    try:
        return _assumptions.ASSUMPTIONS[name]
    except KeyError:
        raise KeyError(f"unknown assumption {name!r}; known: {', '.join(sorted(_assumptions.ASSUMPTIONS))}") from None


def assumptions():
    """Every modelling constant as a DataFrame: current value, unit, plausible range, source, why."""
    import pandas as pd

    rows = [{"name": a.name, "value": _assumptions.value(a.name), "unit": a.unit,
             "low": a.plausible[0] if a.plausible else None, "high": a.plausible[1] if a.plausible else None,
             "source": a.source, "why": a.why} for a in _assumptions.ASSUMPTIONS.values()]
    return pd.DataFrame(rows).set_index("name")
