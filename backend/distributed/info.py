"""Which rank of which world this process is: what per-rank traces record (HTA's ``distributedInfo``)."""
from __future__ import annotations

import torch.distributed as dist

__all__ = ["distributed_info"]


def distributed_info() -> dict | None:
    """Rank, world size and backend of the default process group; None when none is initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
