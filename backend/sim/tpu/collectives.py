"""FSDP collectives of a TPU slice over its ICI, costed with the shared alpha-beta model
(``backend.sim.collectives``).

A slice of ``chips`` is one torus "node" whose links carry ``ici_bytes_per_s / 2`` per chip and
direction: the pages print the bidirectional figure (v6e: 800 GBps, which matches the printed
all-reduce bandwidth per pod, 102.4 TB/s / 256 chips = 400 GB/s). Only the bandwidth term is
kept: a 2D torus reduces in two rings of sqrt(chips) steps each (2 x 15 on 16x16), whose
microsecond step latencies stay under 1% of a layer's gradient reduction.

What is costed is what the step cannot hide: the gradient reduce-scatter of every parameter,
``gradient_reduction_exposed`` of it unless the compiled program offloads it to the SparseCores
(``gradient_reduction_on_sparsecore``), where it overlaps with compute. The weight all-gathers are
left out: MaxText's recipes fuse them into compute (continuation fusion, ``CF_FOR_ALL_GATHER``).
"""
from __future__ import annotations

from backend.sim.collectives import collective_cost
from backend.sim.topology import Topology
from backend.sim.tpu.presets import TpuConfig

__all__ = ["slice_topology", "exposed_gradient_reduction_ns"]


def slice_topology(config: TpuConfig, chips: int) -> Topology:
    """``chips`` chips of ``config`` on their ICI torus, as the shared collective model sees them."""
    if not 1 <= chips <= config.pod_chips:
        raise ValueError(f"a {config.name} slice has 1 to {config.pod_chips} chips, got {chips}")
    return Topology(name=f"{config.name}-{chips}", device=config.name, devices_per_node=chips,
                    intra_fabric="torus2d", intra_bytes_per_s=config.ici_bytes_per_s / 2, max_nodes=1)


def exposed_gradient_reduction_ns(config: TpuConfig, grad_bytes: int, chips: int) -> float:
    """Step time the FSDP gradient reduce-scatter of ``grad_bytes`` over ``chips`` adds."""
    if config.gradient_reduction_on_sparsecore or chips == 1:
        return 0.0
    cost = collective_cost("reduce_scatter", grad_bytes, chips, slice_topology(config, chips), "ring")
    return config.gradient_reduction_exposed * cost.bandwidth_ns
