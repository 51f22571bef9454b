"""``workbench.distributed.launch``: ranks' results come back by rank, however large."""
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
