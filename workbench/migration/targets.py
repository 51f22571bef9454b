"""What the migration report compares: a target and a baseline, each a cost model and a preset.

Named as elsewhere in the workbench: a preset name of the role's usual device ("trn2" as the
target is a NeuronCore, "h100" as the baseline a GPU), or ``device:preset`` for any simulated
device ("tpu:v6e", "cuda:h100", "neuron:trn1"); a derived preset config passes through. The model
always runs on the ``neuron`` device; each side costs the same recorded op stream with its own
cost model (a TPU's on the compiled, XLA-style path).
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.sim import hardware_kinds as kinds
from backend.sim.presets import DEFAULT_NEURON_TARGET

__all__ = ["CostTarget", "cost_target", "RUN_TARGET_FOR_OTHERS"]

# The NeuronCore that runs the model (and reports op coverage) when the target is not a NeuronCore.
RUN_TARGET_FOR_OTHERS = DEFAULT_NEURON_TARGET


@dataclass(frozen=True)
class CostTarget:
    """One side of the report: ``device`` ("neuron", "cuda" or "tpu") and its preset ``config``."""

    device: str
    config: object

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def hbm_bytes(self) -> float:
        return self.config.hbm_bytes


def cost_target(spec, default_device: str) -> CostTarget:
    """``spec`` ("trn2", "tpu:v6e", a preset config) as a CostTarget; bare names belong to
    ``default_device``. Unknown names raise ValueError listing the presets."""
    if isinstance(spec, CostTarget):
        return spec
    if not isinstance(spec, str):
        device = kinds.kind(spec.kind).device if hasattr(spec, "kind") else default_device
        return CostTarget(device, _lookup(device, spec))
    device, _, name = spec.partition(":") if ":" in spec else (default_device, "", spec)
    return CostTarget(device, _lookup(device, name))


def _lookup(device: str, name):
    from backend.sim.presets import get_target

    if device not in kinds.devices():
        raise ValueError(f"unknown device {device!r} in a migration target; use "
                         f"{', '.join(d + ':' for d in kinds.devices())}")
    return get_target(name, kind=kinds.for_device(device).name)
