"""What importing the workbench registers with ``torch.distributed``: the ``"neuron"`` backend,
and ``"nccl"`` for whenever CUDA emulation is on."""
from __future__ import annotations

from . import backend, nccl

__all__ = ["register"]


def register() -> None:
    """Once per process; calling it again changes nothing."""
    backend.register()
    nccl.register()
