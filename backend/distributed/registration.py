"""What importing the workbench registers with ``torch.distributed``: the ``"neuron"`` backend,
``"nccl"`` for whenever CUDA emulation is on, and the
pipeline-parallel changes (a traced stage moves to ``neuron``; schedules warm up on fake worlds), and DDP's
shape check answered on fake worlds."""
from __future__ import annotations

from . import backend, nccl, parameter_checks, pipeline_fake_world, pipeline_tracing

__all__ = ["register"]


def register() -> None:
    """Once per process; calling it again changes nothing."""
    backend.register()
    nccl.register()
    pipeline_tracing.install()
    pipeline_fake_world.install()
    parameter_checks.install()
