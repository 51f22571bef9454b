"""Tensor parallel through DTensor (``parallelize_module`` with ``ColwiseParallel`` /
``RowwiseParallel``) on the ``neuron`` device: sharded parameters are DTensors over device-tensor
shards, a step (forward, backward, SGD) equals the unsharded model's, two real ranks equal the
same job on CPU gloo ranks, and one rank of a fake world shows the row-parallel layer's
all-reduce on the collective lane."""
import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import workbench as wb
from backend.distributed import BACKEND_NAME
from backend.sim.collectives import collective_cost
from workbench.distributed import fake_world, launch

PLAN = {"0": ColwiseParallel(), "2": RowwiseParallel()}


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _batch() -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def _step(model, device) -> dict:
    """One SGD step; the output, the full gradients and the full parameters after the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(_batch().to(device))
    out.square().sum().backward()
    grads = [_full(p.grad) for p in model.parameters()]
    opt.step()
    return {"out": _full(out), "grads": grads, "params": [_full(p) for p in model.parameters()]}


def _tensor_parallel_step(rank, world, device):
    mesh = init_device_mesh(device if device == "cpu" else BACKEND_NAME, (world,))
    model = parallelize_module(_mlp().to(device), mesh, PLAN)
    return _step(model, device)


def _assert_equal(ours: dict, reference: dict, **tolerance) -> None:
    torch.testing.assert_close(ours["out"], reference["out"], **tolerance)
    for key in ("grads", "params"):
        for a, b in zip(ours[key], reference[key], strict=True):
            torch.testing.assert_close(a, b, **tolerance)


@pytest.fixture
def world_of_one():
    dist.init_process_group(BACKEND_NAME, store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_parameters_are_dtensors_over_device_shards(world_of_one, neuron):
    model = parallelize_module(_mlp().to(neuron), init_device_mesh(BACKEND_NAME, (1,)), PLAN)
    weight = model[0].weight
    assert isinstance(weight, DTensor) and weight.device.type == "neuron"
    assert weight.to_local().device.type == "neuron"


def test_a_step_on_one_rank_equals_the_unsharded_cpu_model(world_of_one, neuron):
    _assert_equal(_tensor_parallel_step(0, 1, neuron), _step(_mlp(), "cpu"), rtol=0, atol=0)


@pytest.mark.slow
def test_two_ranks_equal_cpu_gloo_ranks_and_the_unsharded_model():
    neuron = launch(_tensor_parallel_step, 2, "neuron", start_method="spawn")
    cpu = launch(_tensor_parallel_step, 2, "cpu", backend="gloo", start_method="spawn")
    reference = _step(_mlp(), "cpu")
    for ours, theirs in zip(neuron, cpu, strict=True):
        _assert_equal(ours, theirs, rtol=0, atol=0)
        # The row-parallel layer sums two partial products: equal up to rounding.
        _assert_equal(ours, reference)


def test_one_rank_of_a_fake_world_shows_the_row_parallel_all_reduce(neuron):
    fake_world(8)
    try:
        model = parallelize_module(_mlp().to(neuron), init_device_mesh(BACKEND_NAME, (8,)), PLAN)
        with wb.profile() as prof:
            model(_batch().to(neuron)).sum().backward()
    finally:
        dist.destroy_process_group()
    lane = [op for op in prof.trace.ops if op.name.startswith("collective::") and op.kind != "wait"]
    assert [op.name for op in lane] == ["collective::all_reduce"]
    # The row-parallel layer's partial (4, 4) fp32 outputs, summed over the 8 ranks.
    expected = collective_cost("all_reduce", 4 * 4 * 4, 8)
    assert lane[0].end_ns - lane[0].start_ns == pytest.approx(expected.time_ns)
    assert any(e.engine == "collective" for e in prof.trace.events)
