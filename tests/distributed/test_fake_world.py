"""One rank of a large world: PyTorch's fake process group moves no values, the topology model
still prices every collective, and the rank's profile shows them on the collectives lane."""
import pytest
import torch
import torch.distributed as dist

import workbench as wb
from backend.distributed import BACKEND_NAME, NeuronProcessGroup
from backend.sim.collectives import collective_cost
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
    assert grads[:2].tolist() == [1.0, 1.0]                        # nothing was exchanged
    lane = [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]
    assert [op.name for op in lane] == ["collective::all_reduce", "collective::reduce_scatter",
                                        "collective::barrier"]
    expected = collective_cost("all_reduce", 2**26, 1024, "trn2.48xlarge")
    assert expected.algorithm == "hierarchical"
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(expected.time_ns)
    assert "collective" in prof.trace.engines
    assert any(e.engine == "collective" for e in prof.trace.events)


def test_collectives_are_not_recorded_for_host_tensors(world_1024):
    with wb.profile() as prof:
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
