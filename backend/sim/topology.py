"""Interconnect presets: how the chips (or GPUs) of a cluster talk to each other.

A :class:`Topology` is two levels, the way both vendors build clusters: ``devices_per_node``
chips joined by a fast fabric inside a node (NeuronLink, NVLink/NVSwitch), and nodes joined by
a network (EFA, InfiniBand). Each level has a bandwidth per device and direction and a latency
per algorithm step (alpha). Built on the one preset mechanism (``backend.sim.spec``): every number
is cited from shared/hardware.md's "Scale-out" table or labelled an ASSUMPTION with a range.

Vendors print link bandwidth summed over both directions (NVIDIA: "900 GB/s per GPU, both
directions"); a ring step sends one way while it receives the other, so the presets keep half
the printed figure. Network rates (Gb/s) are per direction already; an instance's EFA bandwidth
is shared by its chips. Look presets up with :func:`get_topology`.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.sim.spec import ASSUMPTION, HardwareConfig, spec

__all__ = ["Topology", "TOPOLOGIES", "DEFAULT_TOPOLOGY", "get_topology", "list_topologies", "per_core"]

_SCALE_OUT = "shared/hardware.md Scale-out table"
_NCCL_TUNING = ("NCCL src/graph/tuning.cc hwLat, per ring step: NVLink 0.47 us (LL) .. 3.4 us "
                "(Simple); network 2.7 .. 14 us")
DEFAULT_TOPOLOGY = "trn2.48xlarge"


@dataclass(frozen=True)
class Topology(HardwareConfig):
    """A node of ``devices_per_node`` devices, repeated up to ``max_nodes`` times."""

    kind = "topology"
    name: str = DEFAULT_TOPOLOGY
    device: str = spec("trainium2", unit="", source=_SCALE_OUT, help="what one rank's device is")
    devices_per_node: int = spec(16, unit="devices", source=_SCALE_OUT + ": trn2.48xlarge, 16 Trainium2",
                                 help="chips (GPUs) inside one node, on the node's fabric")
    intra_fabric: str = spec("torus2d", unit="", source=_SCALE_OUT + ": NeuronLink-v3, 4x4 2D torus",
                             help="shape of the node's fabric: torus2d, switch (NVSwitch) or ring")
    intra_bytes_per_s: float = spec(
        512e9, unit="B/s", help="fabric bandwidth per device and direction inside a node",
        source=_SCALE_OUT + ": 1,024 GB/s intra-instance per chip (both directions) / 2")
    intra_latency_ns: float = spec(
        2000.0, unit="ns", plausible=(500.0, 5000.0), help="latency of one algorithm step inside a node",
        source=ASSUMPTION + ": of the order of NCCL's NVLink step latency (" + _NCCL_TUNING + "); "
               "Neuron publishes no per-hop figure")
    inter_bytes_per_s: float = spec(
        25e9, unit="B/s", help="network bandwidth per device and direction between nodes",
        source=_SCALE_OUT + ": EFAv3 3,200 Gb/s per instance = 400 GB/s / 16 chips")
    inter_latency_ns: float = spec(
        10_000.0, unit="ns", plausible=(2700.0, 20_000.0), help="latency of one algorithm step between nodes",
        source=ASSUMPTION + ": of the order of NCCL's network step latency (" + _NCCL_TUNING + ")")
    max_nodes: int = spec(1 << 20, unit="nodes", source=_SCALE_OUT + ": EFA scales out without a fixed limit",
                          help="most nodes a group may span on this topology")

    def nodes_for(self, ranks: int) -> int:
        """Nodes a group of ``ranks`` consecutive ranks (one per device) spans."""
        nodes = -(-ranks // self.devices_per_node)
        if nodes > self.max_nodes:
            raise ValueError(f"{self.name} has at most {self.max_nodes} nodes of {self.devices_per_node} "
                             f"devices; a group of {ranks} ranks does not fit")
        return nodes


_TRN1 = "trn1.32xlarge"
_A100_NET = _SCALE_OUT + ": InfiniBand HDR 200 Gb/s per GPU = 25 GB/s"
_H100_NET = _SCALE_OUT + ": InfiniBand NDR 400 Gb/s per GPU = 50 GB/s"


def _gpu_node(name: str, device: str, nvlink_bytes_per_s: float, nvlink_source: str,
              ib_bytes_per_s: float, ib_source: str) -> Topology:
    return Topology.cited(
        name, device=(device, _SCALE_OUT), devices_per_node=(8, _SCALE_OUT + ": DGX/HGX, 8 GPUs"),
        intra_fabric=("switch", _SCALE_OUT + ": NVLink via NVSwitch"),
        intra_bytes_per_s=(nvlink_bytes_per_s, nvlink_source),
        inter_bytes_per_s=(ib_bytes_per_s, ib_source))


TOPOLOGIES: dict[str, Topology] = {t.name: t for t in (
    Topology.cited(
        _TRN1, device=("trainium", _SCALE_OUT),
        devices_per_node=(16, _SCALE_OUT + ": trn1.32xlarge, 16 Trainium"),
        intra_fabric=("torus2d", _SCALE_OUT + ": NeuronLink-v2, 2D torus"),
        intra_bytes_per_s=(192e9, _SCALE_OUT + ": NeuronLink-v2 384 GB/s per chip (both directions) / 2"),
        inter_bytes_per_s=(6.25e9, _SCALE_OUT + ": EFA 800 Gb/s per instance = 100 GB/s / 16 chips")),
    Topology(),
    Topology.cited(
        "trn2-ultraserver",
        devices_per_node=(16, _SCALE_OUT + ": Trn2 UltraServer = 4 trn2.48xlarge instances of 16 chips"),
        inter_bytes_per_s=(128e9, _SCALE_OUT + ": NeuronLink-v3 across the 4 instances, 256 GB/s per chip "
                                               "inter-instance (both directions) / 2"),
        inter_latency_ns=(2000.0, ASSUMPTION + ": NeuronLink between instances, as inside one (the range of "
                                                 "intra_latency_ns, not the network's)", (500.0, 5000.0)),
        max_nodes=(4, _SCALE_OUT + ": 64 Trainium2 chips in 4 instances")),
    _gpu_node("dgx-a100", "a100", 300e9, _SCALE_OUT + ": NVLink3 600 GB/s per GPU (both directions) / 2",
              25e9, _A100_NET),
    _gpu_node("dgx-h100", "h100", 450e9, _SCALE_OUT + ": NVLink4 900 GB/s per GPU (both directions) / 2",
              50e9, _H100_NET),
    _gpu_node("dgx-h200", "h200", 450e9, _SCALE_OUT + ": NVLink4 900 GB/s per GPU (both directions) / 2",
              50e9, _H100_NET),
)}
_ALIASES = {"trn1": _TRN1, "trn2": DEFAULT_TOPOLOGY, "a100": "dgx-a100", "h100": "dgx-h100", "h200": "dgx-h200"}


def list_topologies() -> dict[str, Topology]:
    return dict(TOPOLOGIES)


def get_topology(topology: str | Topology | None = None) -> Topology:
    """A topology preset by name (or the device's short name: ``"trn2"``, ``"h100"``)."""
    if isinstance(topology, Topology):
        return topology
    key = str(topology or DEFAULT_TOPOLOGY).lower()
    found = TOPOLOGIES.get(_ALIASES.get(key, key))
    if found is None:
        raise ValueError(f"unknown topology {topology!r}; known: {', '.join(sorted(TOPOLOGIES))} "
                         f"(aliases: {', '.join(sorted(_ALIASES))})")
    return found


def per_core(topology: str | Topology, cores_per_chip, **changes) -> Topology:
    """``topology`` seen by ranks that are NeuronCores, ``cores_per_chip`` to a chip: that many
    times the devices per node, each with its chip's link bandwidth -- a ring through both (all)
    cores of every chip crosses the chip's links once per chip, so each ring step still has the
    chip's bandwidth. ``changes`` are what-ifs on the result.

    ``cores_per_chip``: a count, or the NeuronCore config the ranks run on; a logical core's
    config (``"trn2/lnc2"``, ``backend.sim.logical_cores``) counts logical cores, as the
    runtime does: 4 ranks per trn2 chip at LNC=2."""
    cores_per_chip = getattr(cores_per_chip, "cores_per_chip", cores_per_chip)
    chip = get_topology(topology)
    if cores_per_chip == 1 and not changes:
        return chip
    return chip.derive(f"{chip.name}/core", devices_per_node=chip.devices_per_node * cores_per_chip, **changes)
