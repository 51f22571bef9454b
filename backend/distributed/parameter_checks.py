"""DDP's construction-time check that every rank holds parameters of the same shapes, on a
fake world.

``DistributedDataParallel.__init__`` calls ``dist._verify_params_across_processes``, which
writes each parameter's sizes and strides into an integer tensor on the parameters' device,
all-gathers it and reads it back. For a timing-only model that tensor has no values to read
(``TimingOnlyError``). On one rank of a fake world every rank is this rank, so the shapes agree
by construction: there the check is answered locally, and the all-gather it would have issued
is still reported, so its (small) cost stays on the collectives lane.
"""
from __future__ import annotations

import functools

import torch.distributed as dist

from .process_group import NeuronProcessGroup
from .replacement import replace_once
from .reporting import report_collective

__all__ = ["install"]

_INTS_PER_PARAMETER = 2          # a parameter's dimension count, then its sizes and strides


def _metadata_bytes(tensors) -> int:
    return 8 * sum(_INTS_PER_PARAMETER + 2 * t.dim() for t in tensors)


def _verify_on_fake_worlds(verify):
    @functools.wraps(verify)
    def run(process_group, tensors, logger=None):
        if isinstance(process_group, NeuronProcessGroup) and process_group.fake:
            report_collective("all_gather", _metadata_bytes(tensors) * process_group.size(),
                              process_group.size(), process_group.topology)
            return None
        return verify(process_group, tensors, logger)
    return run


def install() -> None:
    """Once per process: DDP's shape check on a fake world is answered locally."""
    replace_once(dist, "_verify_params_across_processes", _verify_on_fake_worlds)
