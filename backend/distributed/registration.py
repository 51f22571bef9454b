"""What importing the workbench registers with ``torch.distributed``: the ``"neuron"`` backend,
``"nccl"`` for whenever CUDA emulation is on, and the
pipeline-parallel changes once the script imports ``torch.distributed.pipelining`` (a traced stage
moves to ``neuron``; schedules warm up on fake worlds, and a fake world's step is
joined into the whole pipeline's), and DDP's
shape check answered on fake worlds."""
from __future__ import annotations

from . import backend, nccl, parameter_checks
from .after_import import after_import

__all__ = ["register"]


def register() -> None:
    """Once per process; calling it again changes nothing."""
    backend.register()
    nccl.register()
    parameter_checks.install()
    after_import("torch.distributed.pipelining", _install_pipelining_changes)


def _install_pipelining_changes() -> None:
    from . import pipeline_fake_world, pipeline_join, pipeline_tracing

    pipeline_tracing.install()
    pipeline_fake_world.install()
    pipeline_join.install()
