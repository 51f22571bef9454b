"""``torch.compile`` while CUDA emulation is on.

The default backend, Inductor, would generate Triton kernels for a GPU this CPU-only build
cannot run (and crash on the emulated tensors). Under emulation a default-backend compile goes
to the workbench's ``neuron`` backend (backend/compile), which runs the graph on the device
tensors and feeds the simulator sessions; other backends ("eager", "aot_eager", callables) are
left alone. Without the neuron backend, ``torch.compile`` raises a clear error up front.
"""
from __future__ import annotations

import logging

import torch

from ..patching import Patcher

__all__ = ["install", "routed_backend"]

log = logging.getLogger(__name__)
_DEFAULT = "inductor"


def routed_backend() -> str:
    """The backend a default ``torch.compile`` uses under emulation (registering it if needed)."""
    # Inductor would generate Triton kernels for a GPU this CPU-only build does not have.
    from backend.compile import BACKEND_NAME, register

    register()
    return BACKEND_NAME


def install(patcher: Patcher) -> None:
    original = torch.compile

    def compile(model=None, *, backend=_DEFAULT, mode=None, options=None, **kwargs):
        if backend == _DEFAULT:
            backend = routed_backend()
            if options:
                log.warning("torch.compile options %s are Inductor's; ignored under CUDA emulation", options)
                options = None
            if mode is not None:
                from backend.compile import SUPPORTED_MODES

                if mode not in SUPPORTED_MODES:
                    log.warning("torch.compile mode %r is not supported by the %s backend; ignored",
                                mode, backend)
                    mode = None
        return original(model, backend=backend, mode=mode, options=options, **kwargs)

    compile.__doc__ = original.__doc__
    patcher.setattr(torch, "compile", compile)
