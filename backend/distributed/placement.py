"""Where the ranks of a job sit: one per NeuronCore on Trainium, one per GPU.

A Trainium job runs a rank per NeuronCore (torchrun ``--nproc_per_node=32`` on a trn1.32xlarge;
64 or 128 on a trn2.48xlarge by logical-core config), so a topology counted in chips must be seen
per core (``backend.sim.topology.per_core``) before it prices the job's collectives: counted per
chip, 32 NeuronCore ranks would span two trn1 instances over EFA instead of one over NeuronLink.
"""
from __future__ import annotations

from backend.sim.logical_cores import physical_name
from backend.sim.presets import list_presets
from backend.sim.topology import Topology, get_topology, per_core

__all__ = ["ranks_per_device", "rank_topology"]


def _chip_of(name: str) -> str | None:
    try:
        return get_topology(physical_name(name.rstrip("*"))).device
    except ValueError:
        return None


def ranks_per_device(topology: str | Topology) -> int:
    """Ranks a job runs per device of ``topology``: the NeuronCores of its chip -- the selected
    target's count (its logical-core config included) when the selected target is that chip, else
    the chip's stock preset's -- and 1 per GPU."""
    from backend.device.neuron_module import get_target

    device = get_topology(topology).device
    selected = get_target()
    if _chip_of(selected.name) == device:
        return selected.cores_per_chip
    for name, config in list_presets("neuron").items():
        if _chip_of(name) == device:
            return config.cores_per_chip
    return 1


def rank_topology(topology: str | Topology | None, ranks_per_chip: int | None = None) -> Topology:
    """``topology`` as the ranks see it: per core when each chip holds several ranks."""
    chip = get_topology(topology)
    return per_core(chip, ranks_per_device(chip) if ranks_per_chip is None else ranks_per_chip)
