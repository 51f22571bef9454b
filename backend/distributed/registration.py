"""What importing the workbench registers with ``torch.distributed``: the ``"neuron"`` backend,
``"nccl"`` for whenever CUDA emulation is on, and pipeline tracing that lets a stage move to ``neuron``."""
from __future__ import annotations

from . import backend, nccl, pipeline_tracing

__all__ = ["register"]


def register() -> None:
    """Once per process; calling it again changes nothing."""
    backend.register()
    nccl.register()
    pipeline_tracing.install()
