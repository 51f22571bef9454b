"""Functional collectives (``torch.ops._c10d_functional``, what DTensor and tensor parallel issue)
on device tensors reach the ``neuron`` process group as the device's collectives: each is
priced on the collectives lane and waited for, as ``dist.*`` collectives are; on host tensors
they stay unrecorded. ``dist.scatter`` / ``dist.gather`` (DTensor shards a tensor with a
scatter) are collectives of the group too. Each functional collective is recorded once, as the
group's collective: not also as a host fallback of the ``_c10d_functional`` op, with the time the
process-group API charges for the same bytes and group, with values and timing-only alike."""
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import workbench as wb
from backend.sim.collectives import collective_cost
from workbench.distributed import fake_world

WORLD = 4
TOPOLOGY = "trn2.48xlarge"


@pytest.fixture
def world():
    fake_world(WORLD, topology=TOPOLOGY)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _waited(result):
    return [funcol.wait_tensor(t) for t in result] if isinstance(result, list) else funcol.wait_tensor(result)


FUNCTIONAL = {
    "all_reduce": lambda x, g: funcol.all_reduce(x, "sum", g),
    "all_reduce_coalesced": lambda x, g: funcol.all_reduce_coalesced([x, x], "sum", g),
    "all_gather_single": lambda x, g: funcol.all_gather_single(x, 0, g),
    "all_gather_single_coalesced": lambda x, g: funcol.all_gather_single_coalesced([x, x], g),
    "reduce_scatter_single": lambda x, g: funcol.reduce_scatter_single(x, "sum", 0, g),
    "reduce_scatter_single_coalesced": lambda x, g: funcol.reduce_scatter_single_coalesced([x, x], "sum", [0, 0], g),
    "all_to_all_single": lambda x, g: funcol.all_to_all_single(x, None, None, g),
}
LANE = {"all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_gather_single": "all_gather",
        "all_gather_single_coalesced": "all_gather", "reduce_scatter_single": "reduce_scatter",
        "reduce_scatter_single_coalesced": "reduce_scatter", "all_to_all_single": "all_to_all"}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_collectives_of_device_tensors_are_priced_and_waited_for(world, neuron, name):
    x = torch.ones(8, 4, device=neuron)
    with wb.profile() as prof:
        out = _waited(FUNCTIONAL[name](x, world))
    assert all(t.device == x.device for t in (out if isinstance(out, list) else [out]))
    names = [op.name for op in prof.trace.ops if op.name.startswith("collective::")]
    assert names == [f"collective::{LANE[name]}", "collective::wait"]


def test_functional_collectives_of_host_tensors_are_not_recorded(world):
    with wb.profile() as prof:
        funcol.wait_tensor(funcol.all_reduce(torch.ones(4), "sum", world))
    assert not [op for op in prof.trace.ops if op.name.startswith("collective::")]


def test_scatter_and_gather_are_priced_on_the_full_tensor(world, neuron):
    shard = torch.empty(4, device=neuron)
    with wb.profile() as prof:
        dist.scatter(shard, [torch.full((4,), float(r), device=neuron) for r in range(WORLD)], src=0)
        dist.gather(shard, [torch.empty(4, device=neuron) for _ in range(WORLD)], dst=0)
    lane = [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]
    assert [op.name for op in lane] == ["collective::scatter", "collective::gather"]
    full = collective_cost("scatter", WORLD * 4 * 4, WORLD, TOPOLOGY).time_ns
    assert [op.end_ns - op.start_ns for op in lane] == pytest.approx([full, full])


def test_scatter_on_a_world_of_one_hands_the_root_its_own_piece(neuron):
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        shard = torch.empty(3, device=neuron)
        dist.scatter(shard, [torch.arange(3.0, device=neuron)], src=0)
        gathered = [torch.empty(3, device=neuron)]
        dist.gather(shard * 2, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    assert shard.tolist() == [0.0, 1.0, 2.0] and gathered[0].tolist() == [0.0, 2.0, 4.0]


# The same collective through the process-group API, for the time a functional one must match.
PROCESS_GROUP = {
    "all_reduce": lambda x, g: dist.all_reduce(x, group=g),
    "all_gather": lambda x, g: dist.all_gather_into_tensor(
        torch.empty(WORLD * x.shape[0], *x.shape[1:], device=x.device), x, group=g),
    "reduce_scatter": lambda x, g: dist.reduce_scatter_tensor(
        torch.empty(x.shape[0] // WORLD, *x.shape[1:], device=x.device), x, group=g),
}
ONE_SHOT = {
    "all_reduce": lambda x, g: funcol.all_reduce(x, "sum", g),
    "all_gather": lambda x, g: funcol.all_gather_tensor(x, 0, g),
    "reduce_scatter": lambda x, g: funcol.reduce_scatter_tensor(x, "sum", 0, g),
}


def _lane(prof):
    return [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]


def _fallbacks(prof):
    return [op.name for op in prof.trace.ops if op.kind == "fallback"]


@pytest.mark.parametrize("timing_only", [False, True], ids=["values", "timing-only"])
@pytest.mark.parametrize("kind", sorted(ONE_SHOT))
def test_a_functional_collective_is_recorded_once_and_costs_what_the_process_group_api_does(
        world, neuron, kind, timing_only):
    """Not also a host fallback of the ``_c10d_functional`` op (nor of its ``wait_tensor``):
    the same ops, the same lane time and the same step time as ``dist.*`` for the same bytes."""
    profiles = {}
    for api, issue in (("functional", lambda x: funcol.wait_tensor(ONE_SHOT[kind](x, world))),
                       ("process_group", lambda x: PROCESS_GROUP[kind](x, world))):
        with wb.profile(timing_only=timing_only) as prof:
            issue(torch.ones(8, 4, device=neuron))
        profiles[api] = prof
    functional, reference = profiles["functional"], profiles["process_group"]
    assert _fallbacks(functional) == [] and not [op for op in functional.trace.ops if "c10d" in op.name]
    assert [op.name for op in functional.trace.ops if op.name.startswith("collective::")] == [
        f"collective::{kind}", "collective::wait"]
    assert [op.name for op in functional.trace.ops] == [op.name for op in reference.trace.ops]
    lane, expected = _lane(functional), _lane(reference)
    assert [op.end_ns - op.start_ns for op in lane] == pytest.approx([op.end_ns - op.start_ns for op in expected])
    nbytes = 8 * 4 * 4 * (WORLD if kind == "all_gather" else 1)
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(collective_cost(kind, nbytes, WORLD, TOPOLOGY).time_ns)
    assert functional.summary["total_time"] == pytest.approx(reference.summary["total_time"])
    assert functional.summary["fallback_count"] == 0


def test_functional_collective_values_stay_correct_on_a_world_of_one(neuron):
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = torch.arange(8.0, device=neuron)
        with wb.profile() as prof:
            summed = funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
            gathered = funcol.wait_tensor(funcol.all_gather_tensor(x, 0, dist.group.WORLD))
        values = (summed.tolist(), gathered.tolist())
    finally:
        dist.destroy_process_group()
    assert values == (list(range(8)), list(range(8)))
    assert _fallbacks(prof) == []
    assert [op.name for op in _lane(prof)] == ["collective::all_reduce", "collective::all_gather"]


@pytest.mark.parametrize("timing_only", [False, True], ids=["values", "timing-only"])
def test_dtensor_full_tensor_is_one_all_gather_and_no_fallback(world, neuron, timing_only):
    mesh = init_device_mesh("neuron", (WORLD,))
    with wb.profile(timing_only=timing_only):
        sharded = distribute_tensor(torch.ones(8, 4, device=neuron), mesh, [Shard(0)])
    with wb.profile(timing_only=timing_only) as prof:
        sharded.full_tensor() * 2
    assert _fallbacks(prof) == []
    lane = _lane(prof)
    assert [op.name for op in lane] == ["collective::all_gather"]
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(
        collective_cost("all_gather", 8 * 4 * 4, WORLD, TOPOLOGY).time_ns)


@pytest.mark.parametrize("timing_only", [False, True], ids=["values", "timing-only"])
def test_tensor_parallel_forward_backward_records_each_collective_once(world, neuron, timing_only):
    mesh = init_device_mesh("neuron", (WORLD,))
    with wb.profile(timing_only=timing_only):
        model = parallelize_module(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).to(neuron),
            mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        batch = torch.ones(4, 16, device=neuron)
    with wb.profile(timing_only=timing_only) as prof:
        model(batch).sum().backward()
    assert _fallbacks(prof) == [] and not [op for op in prof.trace.ops if "c10d" in op.name]
    lane = _lane(prof)
    # The row-parallel layer's (4, 16) fp32 partial sums; the backward needs no collective.
    assert [op.name for op in lane] == ["collective::all_reduce"]
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(
        collective_cost("all_reduce", 4 * 16 * 4, WORLD, TOPOLOGY).time_ns)
