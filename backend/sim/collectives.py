"""The cost of a collective over a topology: alpha-beta models of ring, tree and hierarchical algorithms.

Each algorithm is a sequence of phases; a phase on a link of bandwidth ``B`` (bytes/s per device
and direction) with step latency ``alpha`` costs ``steps * alpha + moved_bytes / B``. For ``p``
ranks and ``N`` bytes (the textbook forms, e.g. Thakur et al. 2005; NCCL's performance notes):

- ring all_reduce: ``2(p-1)/p * N/B + 2(p-1) * alpha`` (reduce-scatter then all-gather)
- ring all_gather / reduce_scatter / all_to_all: ``(p-1)/p * N/B + (p-1) * alpha``; scatter /
  gather (root to all, all to root; DTensor shards a tensor with a scatter) move the same bytes
  through the root's link and cost the same (ring only)
- ring broadcast (pipelined chain): ``N/B + (p-1) * alpha``
- tree (pipelined binary tree, depth ``d = ceil(log2 p)``): all_reduce ``2N/B + 2d * alpha``,
  broadcast ``N/B + d * alpha``
- hierarchical (``g`` devices per node, ``n`` nodes): the intra-node ring phases around an
  inter-node phase on ``N/g`` bytes; e.g. all_reduce = intra reduce-scatter + inter all_reduce
  + intra all-gather
- send_recv: ``N/B + alpha``; barrier: an all_reduce of no bytes.

``N`` is the tensor of all_reduce / broadcast / send_recv, the gathered output of all_gather
and gather, the full input of reduce_scatter and scatter and each rank's input of all_to_all.
A flat ring across nodes runs at its slowest link. ``algorithm="auto"`` takes the fastest applicable one, as NCCL's tuner does.
Pure Python: the simulator never imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, log2

from backend.sim.topology import Topology, get_topology

__all__ = ["COLLECTIVES", "ALGORITHMS", "Phase", "CollectiveCost", "collective_cost", "algorithms_for"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "barrier",
               "scatter", "gather")
_RING_ONLY = ("send_recv", "scatter", "gather")
ALGORITHMS = ("ring", "tree", "hierarchical")
_TREE_COLLECTIVES = ("all_reduce", "broadcast", "barrier")


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of an algorithm on one level of the topology."""

    name: str
    level: str            # "intra" (inside a node) or "inter" (between nodes)
    latency_ns: float
    bandwidth_ns: float

    @property
    def time_ns(self) -> float:
        return self.latency_ns + self.bandwidth_ns


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """What one collective costs: its phases and their sum."""

    collective: str
    algorithm: str
    ranks: int
    nbytes: int
    topology: str
    phases: tuple[Phase, ...]

    @property
    def time_ns(self) -> float:
        return sum(p.time_ns for p in self.phases)

    @property
    def latency_ns(self) -> float:
        return sum(p.latency_ns for p in self.phases)

    @property
    def bandwidth_ns(self) -> float:
        return sum(p.bandwidth_ns for p in self.phases)

    @property
    def bus_bytes_per_s(self) -> float:
        """NCCL-tests' "bus bandwidth" of an all_reduce: ``2(p-1)/p * N / time``."""
        factor = 2 * (self.ranks - 1) / self.ranks if self.collective == "all_reduce" else (self.ranks - 1) / self.ranks
        return factor * self.nbytes / (self.time_ns * 1e-9) if self.time_ns else 0.0

    def to_record(self) -> dict:
        return {"collective": self.collective, "algorithm": self.algorithm, "ranks": self.ranks,
                "nbytes": self.nbytes, "topology": self.topology, "time_ns": self.time_ns,
                "latency_ns": self.latency_ns, "bandwidth_ns": self.bandwidth_ns}


@dataclass(frozen=True, slots=True)
class _Link:
    level: str
    bytes_per_s: float
    latency_ns: float


def _links(topo: Topology, ranks: int) -> tuple[_Link, _Link, _Link]:
    """(intra, inter, slowest) links for a group of ``ranks``."""
    intra = _Link("intra", topo.intra_bytes_per_s, topo.intra_latency_ns)
    inter = _Link("inter", topo.inter_bytes_per_s, topo.inter_latency_ns)
    if topo.nodes_for(ranks) == 1:
        return intra, inter, intra
    return intra, inter, _Link("inter", min(intra.bytes_per_s, inter.bytes_per_s),
                               max(intra.latency_ns, inter.latency_ns))


def _ring(name: str, collective: str, nbytes: float, p: int, link: _Link) -> list[Phase]:
    """The ring (or chain) phases of ``collective`` over ``p`` ranks on one link."""
    if p <= 1:
        return []
    beta_ns = nbytes / link.bytes_per_s * 1e9
    a = link.latency_ns
    if collective in ("all_reduce", "barrier"):
        return [Phase(f"{name}reduce_scatter", link.level, (p - 1) * a, (p - 1) / p * beta_ns),
                Phase(f"{name}all_gather", link.level, (p - 1) * a, (p - 1) / p * beta_ns)]
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "scatter", "gather"):
        return [Phase(f"{name}{collective}", link.level, (p - 1) * a, (p - 1) / p * beta_ns)]
    if collective == "broadcast":
        return [Phase(f"{name}broadcast", link.level, (p - 1) * a, beta_ns)]
    if collective == "send_recv":
        return [Phase(f"{name}send_recv", link.level, a, beta_ns)]
    raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")


def _tree(collective: str, nbytes: float, p: int, link: _Link) -> list[Phase]:
    depth = ceil(log2(p)) if p > 1 else 0
    beta_ns = nbytes / link.bytes_per_s * 1e9
    phases = [Phase("tree_reduce", link.level, depth * link.latency_ns, beta_ns)] if collective != "broadcast" else []
    return phases + [Phase("tree_broadcast", link.level, depth * link.latency_ns, beta_ns)]


def _hierarchical(collective: str, nbytes: float, p: int, topo: Topology, intra: _Link, inter: _Link) -> list[Phase]:
    g = min(p, topo.devices_per_node)
    n = topo.nodes_for(p)
    if collective in ("all_reduce", "barrier"):
        return [*_ring("intra_", "reduce_scatter", nbytes, g, intra),
                *_ring("inter_", "all_reduce", nbytes / g, n, inter),
                *_ring("intra_", "all_gather", nbytes, g, intra)]
    if collective == "all_gather":
        return [*_ring("inter_", "all_gather", nbytes / g, n, inter), *_ring("intra_", "all_gather", nbytes, g, intra)]
    if collective == "reduce_scatter":
        return [*_ring("intra_", "reduce_scatter", nbytes, g, intra),
                *_ring("inter_", "reduce_scatter", nbytes / g, n, inter)]
    if collective == "broadcast":
        return [*_ring("inter_", "broadcast", nbytes, n, inter), *_ring("intra_", "broadcast", nbytes, g, intra)]
    if collective == "all_to_all":
        # Each rank's share for its own node moves on the fabric, the rest over the network.
        return [Phase("intra_all_to_all", "intra", (g - 1) * intra.latency_ns,
                      (g - 1) / p * nbytes / intra.bytes_per_s * 1e9),
                Phase("inter_all_to_all", "inter", (n - 1) * inter.latency_ns,
                      (p - g) / p * nbytes / inter.bytes_per_s * 1e9)]
    raise ValueError(f"no hierarchical {collective}")


def algorithms_for(collective: str, ranks: int, topology: str | Topology | None = None) -> tuple[str, ...]:
    """The algorithms that apply to ``collective`` on a group of ``ranks``."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if collective in _RING_ONLY:
        return ("ring",)
    found = ["ring"]
    if collective in _TREE_COLLECTIVES:
        found.append("tree")
    if get_topology(topology).nodes_for(ranks) > 1:
        found.append("hierarchical")
    return tuple(found)


def collective_cost(collective: str, nbytes: int, ranks: int, topology: str | Topology | None = None,
                    algorithm: str = "auto") -> CollectiveCost:
    """The cost of one ``collective`` of ``nbytes`` over ``ranks`` consecutive ranks (one per device)."""
    topo = get_topology(topology)
    if ranks < 1:
        raise ValueError(f"a collective needs at least one rank, got {ranks}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    usable = algorithms_for(collective, ranks, topo)
    if algorithm == "auto":
        costs = [collective_cost(collective, nbytes, ranks, topo, a) for a in usable]
        return min(costs, key=lambda c: c.time_ns)
    if algorithm not in usable:
        raise ValueError(f"{algorithm!r} does not apply to {collective} over {ranks} ranks on {topo.name}; "
                         f"usable: {', '.join(usable)}")
    size = 0 if collective == "barrier" else nbytes
    intra, inter, slowest = _links(topo, ranks)
    if ranks == 1:
        phases: list[Phase] = []
    elif algorithm == "ring":
        phases = _ring("ring_" if collective != "send_recv" else "", collective, size, 2 if collective == "send_recv" else ranks, slowest)
    elif algorithm == "tree":
        phases = _tree(collective, size, ranks, slowest)
    else:
        phases = _hierarchical(collective, size, ranks, topo, intra, inter)
    return CollectiveCost(collective, algorithm, ranks, nbytes, topo.name, tuple(phases))
