"""``workbench.distributed.launch``: ranks' results come back by rank, however large."""
import json

import pytest
import torch
import torch.distributed as dist

from workbench.distributed import launch


pytestmark = pytest.mark.slow      # starts processes (spawn: fork from a threaded pytest worker can hang)


def _big_result(rank, world):
    t = torch.full((2**18,), float(rank))      # 1 MiB: more than a pipe buffer holds
    dist.all_reduce(t)
    return rank, world, t


def test_launch_returns_each_ranks_result_in_rank_order():
    results = launch(_big_result, 2, backend="gloo", start_method="spawn")
    assert [(r, w) for r, w, _ in results] == [(0, 2), (1, 2)]
    for _, _, t in results:
        assert t.shape == (2**18,) and t[0].item() == 1.0


def _one_collective(rank, world):
    t = torch.ones(64, device="neuron")
    dist.all_reduce(t)
    return t.sum().item()


def test_each_rank_writes_its_trace_with_distributed_info(tmp_path):
    results = launch(_one_collective, 2, start_method="spawn", trace_dir=tmp_path)
    assert results == [128.0, 128.0]
    for rank in range(2):
        data = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert data["distributedInfo"] == {"rank": rank, "world_size": 2, "backend": "neuron"}
        assert any(ev.get("name") == "collective::all_reduce" for ev in data["traceEvents"])


def _listening_addresses(rank, world):
    """What this rank's process listens on, once its process group is up."""
    import os

    import psutil
    dist.barrier()
    return sorted({c.laddr.ip for c in psutil.net_connections("inet")
                   if c.pid == os.getpid() and c.status == psutil.CONN_LISTEN})


@pytest.mark.parametrize("backend", ["neuron", "gloo"])
def test_a_launched_job_listens_on_loopback_only(backend):
    # Rank 0's store used to listen on every interface ("::") although MASTER_ADDR is 127.0.0.1.
    pytest.importorskip("psutil")
    by_rank = launch(_listening_addresses, 2, backend=backend, start_method="spawn")
    assert by_rank[0], "rank 0 runs the rendezvous store: it must listen somewhere"
    for addresses in by_rank:
        assert set(addresses) <= {"127.0.0.1", "::1"}, addresses
