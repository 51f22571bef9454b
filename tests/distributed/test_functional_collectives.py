"""Functional collectives (``torch.ops._c10d_functional``, what DTensor and tensor parallel issue)
on device tensors reach the ``neuron`` process group as the device's collectives: each is
priced on the collectives lane and waited for, as ``dist.*`` collectives are; on host tensors
they stay unrecorded. ``dist.scatter`` / ``dist.gather`` (DTensor shards a tensor with a
scatter) are collectives of the group too."""
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

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
