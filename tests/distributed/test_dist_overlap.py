"""Collectives issued by torch.distributed overlap the compute that does not touch their buffers;
the op that reads a reduced buffer (or ``work.wait()``) waits, and only that wait is exposed."""
import pytest
import torch
import torch.distributed as dist

import workbench as wb
from backend.sim.overlap import WAIT_OP
from workbench.distributed import fake_world


@pytest.fixture
def world_64():
    fake_world(64, topology="trn2-ultraserver")
    yield
    dist.destroy_process_group()


def _named(prof, name):
    return [op for op in prof.trace.ops if op.name == name]


def test_bucket_all_reduce_overlaps_the_next_layers_backward(world_64, neuron):
    bucket = torch.ones(1 << 22, device=neuron)              # layer 2's gradients, 16 MiB
    a, b = torch.randn(512, 512, device=neuron), torch.randn(512, 512, device=neuron)
    with wb.profile() as prof:
        work = dist.all_reduce(bucket, async_op=True)
        a @ b                                                 # layer 1's backward: independent
        bucket.div_(64)                                       # touches the bucket: waits
        work.wait()                                           # nothing left to wait for
    [reduce], [mm], [wait], [div] = (_named(prof, n) for n in ("collective::all_reduce", "aten::mm", WAIT_OP,
                                                                "aten::div_"))
    assert mm.start_ns < reduce.end_ns                        # side by side
    assert (wait.start_ns, wait.end_ns, div.start_ns) == (mm.end_ns, reduce.end_ns, reduce.end_ns)
    summary = prof.summary
    # exposed: while the mm waits for its launch, and after it until the bucket is reduced
    exposed_ns = (mm.start_ns - reduce.start_ns) + (reduce.end_ns - mm.end_ns)
    assert summary["exposed_communication_time"] == pytest.approx(exposed_ns * 1e-9)
    assert summary["communication_time"] == pytest.approx((reduce.end_ns - reduce.start_ns) * 1e-9)


def test_compute_that_never_touches_the_buffer_never_waits(world_64, neuron):
    bucket = torch.ones(1 << 20, device=neuron)
    x = torch.randn(256, 256, device=neuron)
    with wb.profile() as prof:
        dist.all_reduce(bucket, async_op=True)
        x @ x
    assert not _named(prof, WAIT_OP)
    assert prof.summary["exposed_communication_time"] > 0    # the trailing all_reduce has no compute beside it


def test_synchronous_all_reduce_waits(world_64, neuron):
    bucket = torch.ones(1 << 20, device=neuron)
    with wb.profile() as prof:
        dist.all_reduce(bucket)                               # c10d calls work.wait() itself
        torch.ones(4, device=neuron) + 1
    [reduce], [wait] = _named(prof, "collective::all_reduce"), _named(prof, WAIT_OP)
    assert wait.end_ns == reduce.end_ns
    assert _named(prof, "aten::add")[0].start_ns >= reduce.end_ns


def test_ddp_backward_overlaps_its_bucket_all_reduces(world_64, neuron):
    from torch.nn.parallel import DistributedDataParallel
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]).to(neuron)
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    x = torch.randn(64, 512, device=neuron)
    ddp(x).sum().backward()                                   # the first step builds the buckets
    with wb.profile() as prof:
        ddp(x).sum().backward()
    reduces = _named(prof, "collective::all_reduce")
    assert len(reduces) > 1
    compute = [op for op in prof.trace.ops if op.name.startswith("aten::") and op.kind == "op"]
    assert any(op.start_ns < reduces[0].end_ns and op.end_ns > reduces[0].start_ns for op in compute)
    summary = prof.summary
    assert 0 < summary["exposed_communication_time"] < summary["communication_time"]


def _gather_or_scatter(name, neuron):
    """(issue(async_op), collective name) for a sequence-parallel all-gather or reduce-scatter of 1 MiB."""
    shard, full = torch.ones(1 << 14, device=neuron), torch.ones(64 << 14, device=neuron)
    if name == "all_gather":
        return (lambda async_op: dist.all_gather_into_tensor(full, shard, async_op=async_op)), "collective::all_gather"
    return (lambda async_op: dist.reduce_scatter_tensor(shard, full, async_op=async_op)), "collective::reduce_scatter"


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter"])
def test_async_gather_or_scatter_runs_beside_an_independent_matmul(world_64, neuron, name):
    """Megatron's async sequence-parallel backward pattern: issue, matmul, wait -> the longer of the two;
    issued synchronously the matmul starts only when the collective is done."""
    issue, op_name = _gather_or_scatter(name, neuron)
    a = torch.randn(512, 512, device=neuron)
    with wb.profile() as overlapped:
        work = issue(async_op=True)
        a @ a
        work.wait()
    with wb.profile() as serial:
        issue(async_op=False)
        a @ a
    for prof in (overlapped, serial):
        [collective], [mm] = _named(prof, op_name), _named(prof, "aten::mm")
        if prof is overlapped:
            assert mm.start_ns < collective.end_ns
            [wait] = _named(prof, WAIT_OP)
            assert wait.end_ns == max(collective.end_ns, mm.end_ns)
        else:
            assert mm.start_ns >= collective.end_ns
