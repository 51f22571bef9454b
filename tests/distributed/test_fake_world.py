"""One rank of a large world: PyTorch's fake process group moves no values, the topology model
still prices every collective, and the rank's profile shows them on the collectives lane."""
import pytest
import torch
import torch.distributed as dist

import workbench as wb
from backend.device.fake_values import FakeWorldValueError
from backend.device.timing_only import TimingOnlyError
from backend.distributed import BACKEND_NAME, NeuronProcessGroup
from backend.sim.collectives import collective_cost
from backend.sim.topology import get_topology, per_core
from workbench.distributed import fake_world


@pytest.fixture
def world_1024():
    fake_world(1024, topology="trn2.48xlarge")
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_rank0_trace_of_a_1024_rank_world(world_1024, neuron):
    assert isinstance(world_1024, NeuronProcessGroup)
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1024, BACKEND_NAME)
    grads = torch.ones(2**24, device=neuron)                       # 64 MiB of fp32 gradients
    with wb.profile() as prof:
        work = dist.all_reduce(grads, async_op=True)
        work.wait()
        shard = torch.empty(2**24 // 1024, device=neuron)
        dist.reduce_scatter_tensor(shard, grads)
        dist.barrier()
    with pytest.raises(FakeWorldValueError, match="all_reduce of a 1024-rank fake world"):
        grads[:2].tolist()                                         # nothing was exchanged
    lane = [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]
    assert [op.name for op in lane] == ["collective::all_reduce", "collective::reduce_scatter",
                                        "collective::barrier"]
    expected = collective_cost("all_reduce", 2**26, 1024, per_core("trn2.48xlarge", 8))   # 8 instances
    assert expected.algorithm == "hierarchical"
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(expected.time_ns)
    assert "collective" in prof.trace.engines
    assert any(e.engine == "collective" for e in prof.trace.events)


def test_collectives_are_not_recorded_for_host_tensors(world_1024):
    with wb.profile() as prof, pytest.warns(UserWarning, match="moves no values"):
        dist.all_reduce(torch.ones(4))
    assert not [op for op in prof.trace.ops if op.name.startswith("collective::")]


def test_backend_is_registered_for_the_neuron_device():
    assert dist.Backend.default_device_backend_map.get("neuron") == BACKEND_NAME
    assert BACKEND_NAME in dist.Backend.backend_list


def test_chrome_trace_names_the_rank_of_the_world_it_ran_in(world_1024, neuron, tmp_path):
    import json
    with wb.profile() as prof:
        dist.all_reduce(torch.ones(8, device=neuron))
    dist.destroy_process_group()                 # exported after the group is gone: the profile kept it
    data = json.loads(prof.export_chrome_trace(tmp_path / "rank0.json").read_text())
    assert data["distributedInfo"] == {"rank": 0, "world_size": 1024, "backend": "neuron"}
    fake_world(1024, topology="trn2.48xlarge")  # the fixture tears a group down


def test_chrome_trace_outside_a_process_group_is_a_world_of_one(neuron, tmp_path):
    import json
    with wb.profile() as prof:
        torch.ones(8, device=neuron) + 1
    data = json.loads(prof.export_chrome_trace(tmp_path / "t.json").read_text())
    assert data["distributedInfo"] == {"rank": 0, "world_size": 1, "backend": "neuron"}


# What reads values: each raises the fake world's error, as timing-only mode does for its tensors.
READS = {
    "item": lambda t: t.item(),
    "float": lambda t: float(t),
    "cpu": lambda t: t.cpu(),
    "to_cpu": lambda t: t.to("cpu"),
    "tolist": lambda t: t.tolist(),
    "copy_into_host": lambda t: torch.empty(()).copy_(t),
    "str": lambda t: str(t),
    "equal": lambda t: torch.equal(t, t),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_a_value_a_fake_collective_left_cannot_be_read(world_1024, neuron, read):
    loss = torch.tensor(2.0, device=neuron)
    dist.all_reduce(loss)                       # in a real world: 2048.0; here still 2.0
    with pytest.raises(FakeWorldValueError, match="all_reduce of a 1024-rank fake world") as error:
        read(loss)
    assert isinstance(error.value, TimingOnlyError)          # one family with timing-only reads
    assert "launch(" in str(error.value)


def test_values_computed_from_a_fake_collective_cannot_be_read(world_1024, neuron):
    loss = torch.tensor(2.0, device=neuron)
    dist.all_reduce(loss)
    average = loss / dist.get_world_size()      # 0.00195 if it were read: looks real, is not
    view = average.reshape(1)[0]
    for t in (average, view, (average * 3).sum()):
        with pytest.raises(FakeWorldValueError):
            t.item()
    assert "no values: written by all_reduce" in repr(average)
    loss.zero_()                                # a clean overwrite makes it this rank's value again
    assert loss.item() == 0.0


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather_float", "broadcast_other_root"])
def test_every_collective_that_would_move_values_marks_its_outputs(world_1024, neuron, collective):
    x = torch.ones(1024, device=neuron)
    out = torch.empty(1, device=neuron)
    if collective == "all_reduce":
        dist.all_reduce(x)
        out = x
    elif collective == "reduce_scatter":
        dist.reduce_scatter_tensor(out, x)
    elif collective == "all_gather_float":
        dist.all_gather_into_tensor(x, out.fill_(1.0))
        out = x
    else:
        dist.broadcast(x, src=3)
        out = x
    with pytest.raises(FakeWorldValueError):
        out.sum().item()


def test_values_this_rank_really_has_stay_readable(world_1024, neuron):
    x = torch.tensor([3.0], device=neuron)
    dist.broadcast(x, src=0)                    # rank 0's own values: what every rank receives
    assert x.item() == 3.0
    shape = torch.tensor([4, 8], device=neuron)
    gathered = torch.empty(2 * 1024, dtype=torch.int64, device=neuron)
    dist.all_gather_into_tensor(gathered, shape)          # DDP's and FSDP's shape checks
    assert gathered[:4].tolist() == [4, 8, 4, 8]
    assert torch.ones(2, device=neuron).sum().item() == 2.0       # untouched tensors read as ever


def test_object_collectives_fail_clearly_or_work(world_1024):
    objects = [None]
    with pytest.raises(FakeWorldValueError, match="broadcast of a 1024-rank fake world"):
        dist.broadcast_object_list(objects, src=1)        # used to try to allocate 130,900 GiB
    objects = [{"lr": 0.1}]
    dist.broadcast_object_list(objects, src=0)
    assert objects == [{"lr": 0.1}]
    gathered = [None] * 1024
    dist.all_gather_object(gathered, "config")            # identical ranks: each has this rank's
    assert set(gathered) == {"config"}


def test_sub_groups_of_a_fake_world_are_fake(world_1024, neuron):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("neuron", (8, 128), mesh_dim_names=("pp", "tp"))
    pp = mesh["pp"].get_group()
    assert isinstance(pp, NeuronProcessGroup) and pp.moves_no_values and pp.topology == world_1024.topology
    assert dist.get_process_group_ranks(pp) == list(range(0, 1024, 128))
    x = torch.ones(4, device=neuron)
    dist.all_reduce(x, group=pp)
    with pytest.raises(FakeWorldValueError, match="all_reduce of a 8-rank fake world"):
        x.sum().item()


def _all_reduce_lane(world: int, topology: str, **placement):
    fake_world(world, topology=topology, **placement)
    try:
        with wb.profile() as prof:
            dist.all_reduce(torch.ones(2**20, device="neuron"))
    finally:
        dist.destroy_process_group()
    (op,) = [op for op in prof.trace.ops if op.name == "collective::all_reduce"]
    return op.end_ns - op.start_ns


def test_32_neuroncore_ranks_of_trn1_are_priced_as_one_instance(neuron):
    one_instance = collective_cost("all_reduce", 2**22, 32, per_core("trn1", 2))
    assert {p.level for p in one_instance.phases} == {"intra"}
    assert _all_reduce_lane(32, "trn1") == pytest.approx(one_instance.time_ns)
    # Counted per chip, the same 32 ranks would span two instances over EFA.
    two_instances = collective_cost("all_reduce", 2**22, 32, "trn1")
    assert "inter" in {p.level for p in two_instances.phases}
    assert _all_reduce_lane(32, "trn1", ranks_per_chip=1) == pytest.approx(two_instances.time_ns)
    assert two_instances.time_ns > one_instance.time_ns


@pytest.mark.parametrize("target,per_instance", [("trn2", 128), ("trn2/lnc2", 64)])
def test_trn2_instances_hold_a_rank_per_logical_core(neuron, target, per_instance):
    torch.neuron.set_target(target)
    fake_world(256, topology="trn2")
    try:
        assert dist.group.WORLD.topology.devices_per_node == per_instance
    finally:
        dist.destroy_process_group()
    inside = collective_cost("all_reduce", 2**22, per_instance, per_core("trn2", per_instance // 16))
    assert _all_reduce_lane(per_instance, "trn2") == pytest.approx(inside.time_ns)


def test_gpu_ranks_are_one_per_gpu(neuron):
    fake_world(16, topology="h100")
    try:
        assert dist.group.WORLD.topology is get_topology("h100")     # the preset itself: 8 GPUs a node
    finally:
        dist.destroy_process_group()
    assert get_topology("h100").devices_per_node == 8
