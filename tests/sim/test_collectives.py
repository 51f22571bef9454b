"""Exact-number tests of the collective cost model on tiny topologies (no torch)."""
import math

import pytest

from backend.sim.collectives import algorithms_for, collective_cost
from backend.sim.topology import Topology, get_topology, list_topologies

# 4 devices per node, 1 GB/s inside (1 byte per ns), 0.5 GB/s between nodes; 10 / 100 ns steps.
TINY = Topology.cited("tiny", devices_per_node=(4, "test"), intra_bytes_per_s=(1e9, "test"),
                      intra_latency_ns=(10.0, "test"), inter_bytes_per_s=(0.5e9, "test"),
                      inter_latency_ns=(100.0, "test"))
N = 1000


def test_ring_all_reduce_is_the_textbook_formula():
    p = 4
    cost = collective_cost("all_reduce", N, p, TINY, "ring")
    assert cost.time_ns == pytest.approx(2 * (p - 1) / p * N / 1e9 * 1e9 + 2 * (p - 1) * 10.0)   # 1500 + 60
    assert cost.bandwidth_ns == pytest.approx(1500.0) and cost.latency_ns == pytest.approx(60.0)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_to_all"])
def test_ring_one_pass_collectives(collective):
    assert collective_cost(collective, N, 4, TINY, "ring").time_ns == pytest.approx(750.0 + 30.0)


@pytest.mark.parametrize("collective", ["scatter", "gather"])
def test_scatter_and_gather_are_ring_only_one_pass_collectives(collective):
    # The root's link carries (p-1)/p of the full tensor, as in a ring reduce-scatter.
    assert algorithms_for(collective, 16, TINY) == ("ring",)
    assert collective_cost(collective, N, 4, TINY).time_ns == pytest.approx(750.0 + 30.0)


def test_ring_broadcast_send_recv_and_barrier():
    assert collective_cost("broadcast", N, 4, TINY, "ring").time_ns == pytest.approx(1000.0 + 30.0)
    assert collective_cost("send_recv", N, 4, TINY).time_ns == pytest.approx(1000.0 + 10.0)
    assert collective_cost("barrier", N, 4, TINY, "ring").time_ns == pytest.approx(60.0)   # no bytes


def test_tree_all_reduce_and_broadcast():
    assert collective_cost("all_reduce", N, 4, TINY, "tree").time_ns == pytest.approx(2 * 1000.0 + 2 * 2 * 10.0)
    assert collective_cost("broadcast", N, 3, TINY, "tree").time_ns == pytest.approx(1000.0 + 2 * 10.0)


def test_flat_ring_across_nodes_runs_at_the_slowest_link():
    p = 8   # two nodes
    cost = collective_cost("all_reduce", N, p, TINY, "ring")
    assert cost.time_ns == pytest.approx(2 * 7 / 8 * N * 2 + 2 * 7 * 100.0)


def test_hierarchical_all_reduce_is_intra_ring_around_inter_all_reduce():
    cost = collective_cost("all_reduce", N, 8, TINY, "hierarchical")
    intra = 2 * (3 / 4 * N + 3 * 10.0)                     # reduce-scatter + all-gather on 4 devices
    inter = 2 * (1 / 2 * (N / 4) * 2 + 1 * 100.0)          # all_reduce of N/4 over 2 nodes at 0.5 B/ns
    assert cost.time_ns == pytest.approx(intra + inter)
    assert [p.level for p in cost.phases] == ["intra", "inter", "inter", "intra"]


def test_hierarchical_all_gather_and_all_to_all():
    assert collective_cost("all_gather", N, 8, TINY, "hierarchical").time_ns == pytest.approx(
        (1 / 2 * N / 4 * 2 + 100.0) + (3 / 4 * N + 30.0))
    assert collective_cost("all_to_all", N, 8, TINY, "hierarchical").time_ns == pytest.approx(
        (3 * 10.0 + 3 / 8 * N) + (100.0 + 4 / 8 * N * 2))


def test_auto_takes_the_fastest_and_one_rank_is_free():
    small = collective_cost("all_reduce", 8, 4, TINY)
    assert small.algorithm == "tree"          # latency-bound: log depth wins
    big = collective_cost("all_reduce", 10**9, 16, TINY)
    assert big.algorithm == "hierarchical"
    assert big.time_ns == min(collective_cost("all_reduce", 10**9, 16, TINY, a).time_ns
                              for a in algorithms_for("all_reduce", 16, TINY))
    assert collective_cost("all_reduce", N, 1, TINY).time_ns == 0.0


def test_errors_name_what_is_known():
    with pytest.raises(ValueError, match="unknown collective"):
        collective_cost("allreduce", N, 2, TINY)
    with pytest.raises(ValueError, match="usable: ring"):
        collective_cost("all_gather", N, 2, TINY, "tree")
    with pytest.raises(ValueError, match="at most 4 nodes"):
        collective_cost("all_reduce", N, 65, "trn2-ultraserver")
    with pytest.raises(ValueError, match="unknown topology"):
        get_topology("trn9")


def test_presets_cite_every_number():
    for topo in list_topologies().values():
        for row in topo.to_records():
            assert row["source"], (topo.name, row["name"])
            if row["source"].startswith("ASSUMPTION"):
                low, high = row["plausible"]
                assert low <= row["value"] <= high, (topo.name, row["name"])
    assert get_topology("h100").intra_bytes_per_s == 450e9
    assert get_topology("trn2").inter_bytes_per_s == 25e9


def test_one_gib_all_reduce_trn2_node_vs_h100_node():
    gib = 2**30
    trn2 = collective_cost("all_reduce", gib, 16, "trn2.48xlarge")
    h100 = collective_cost("all_reduce", gib, 8, "dgx-h100")
    assert trn2.time_ns == pytest.approx(2 * 15 / 16 * gib / 512e9 * 1e9 + 2 * 15 * 2000.0)
    assert h100.time_ns == pytest.approx(2 * 7 / 8 * gib / 450e9 * 1e9 + 2 * 7 * 2000.0)
    assert math.isclose(h100.bus_bytes_per_s, 450e9, rel_tol=0.02)
