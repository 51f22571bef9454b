"""Two real ranks on the neuron device: every plain collective gives the CPU answer and is
priced on the topology's collectives lane."""
import pytest
import torch
import torch.distributed as dist

from backend.lowering import EagerSession
from backend.recording import recording
from backend.sim.collectives import collective_cost
from backend.sim.overlap import WAIT_OP
from workbench.distributed import launch

pytestmark = pytest.mark.slow      # two processes with gloo: > 10 s on a shared machine


def _collectives(rank, world):
    d = "neuron"
    session = EagerSession("trn2")
    with recording(session):
        t = torch.full((4,), float(rank + 1), device=d)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        gathered = torch.empty(8, device=d)
        dist.all_gather_into_tensor(gathered, torch.full((4,), float(rank), device=d))
        scattered = torch.empty(2, device=d)
        dist.reduce_scatter_tensor(scattered, torch.arange(4.0, device=d))
        b = torch.full((3,), float(rank), device=d)
        dist.broadcast(b, src=1)
        a2a = torch.empty(4, device=d)
        dist.all_to_all_single(a2a, torch.arange(4.0, device=d) + 10 * rank)
        p2p = torch.full((2,), 7.0, device=d)
        if rank == 0:
            dist.send(p2p, dst=1)
        else:
            p2p.zero_()
            dist.recv(p2p, src=0)
        dist.barrier()
    pieces = [torch.empty(2, device=d) for _ in range(world)]          # list forms: not on the lane check
    dist.all_gather(pieces, torch.full((2,), float(rank), device=d))
    summed = torch.empty(2, device=d)
    dist.reduce_scatter(summed, [torch.full((2,), float(i + rank), device=d) for i in range(world)])
    # Synchronous collectives leave the compute stream waiting: a wait row after each, apart.
    lane = [(o.name, o.end_ns - o.start_ns) for o in session.trace.ops
            if o.name.startswith("collective::") and o.name != WAIT_OP]
    waits = sum(o.name == WAIT_OP for o in session.trace.ops)
    return {"all_reduce": t.tolist(), "all_gather": gathered.tolist(), "reduce_scatter": scattered.tolist(),
            "broadcast": b.tolist(), "all_to_all": a2a.tolist(), "send_recv": p2p.tolist(), "lane": lane, "waits": waits,
            "engines": session.trace.engines,
            "all_gather_list": [p.tolist() for p in pieces], "reduce_scatter_list": summed.tolist(), "device": str(t.device), "backend": dist.get_backend()}


def test_every_collective_on_two_ranks_is_exact_and_priced():
    r0, r1 = launch(_collectives, 2, topology="dgx-h100", start_method="spawn")
    for rank, r in enumerate((r0, r1)):
        assert r["device"] == f"neuron:{rank}" and r["backend"] == "neuron"   # LOCAL_RANK's core
        assert r["all_reduce"] == [3.0] * 4
        assert r["all_gather"] == [0.0] * 4 + [1.0] * 4
        assert r["broadcast"] == [1.0] * 3
        assert r["send_recv"] == [7.0, 7.0]
        assert "collective" in r["engines"]
        assert r["all_gather_list"] == [[0.0, 0.0], [1.0, 1.0]]
    assert r0["reduce_scatter_list"] == [1.0, 1.0] and r1["reduce_scatter_list"] == [3.0, 3.0]
    assert r0["reduce_scatter"] == [0.0, 2.0] and r1["reduce_scatter"] == [4.0, 6.0]
    assert r0["all_to_all"] == [0.0, 1.0, 10.0, 11.0] and r1["all_to_all"] == [2.0, 3.0, 12.0, 13.0]
    names = [name for name, _ in r0["lane"]]
    assert r0["waits"] >= 1                                # what the compute waited for shows
    assert names == ["collective::all_reduce", "collective::all_gather", "collective::reduce_scatter",
                     "collective::broadcast", "collective::all_to_all", "collective::send_recv",
                     "collective::barrier"]
    expected = collective_cost("all_reduce", 16, 2, "dgx-h100").time_ns
    assert r0["lane"][0][1] == pytest.approx(expected)
