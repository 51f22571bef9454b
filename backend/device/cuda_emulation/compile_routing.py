"""``torch.compile`` while CUDA emulation is on.

The default backend, Inductor, would generate Triton kernels for a GPU this CPU-only build
cannot run (and crash on the emulated tensors). Under emulation a default-backend compile goes
to the workbench's ``neuron`` backend (backend/compile), which runs the graph on the device
tensors and feeds the simulator sessions; other backends ("eager", "aot_eager", callables) are
left alone. Without the neuron backend, ``torch.compile`` raises a clear error up front.

The device does not import the compile layer (they are peers): the backend is named by the
string torch registers it under, and its supported modes are read off what torch resolves
that name to.
"""
from __future__ import annotations

import logging

import torch

from ..patching import Patcher

__all__ = ["install", "routed_backend", "ROUTED_BACKEND"]

log = logging.getLogger(__name__)
_DEFAULT = "inductor"
ROUTED_BACKEND = "neuron"   # Inductor would generate Triton kernels for a GPU this build lacks


def routed_backend():
    """The compiler function a default ``torch.compile`` uses under emulation, looked up by name."""
    from torch._dynamo.backends.registry import lookup_backend
    from torch._dynamo.exc import InvalidBackend

    try:
        return lookup_backend(ROUTED_BACKEND)
    except InvalidBackend:
        raise RuntimeError(
            f"torch.compile under CUDA emulation uses the {ROUTED_BACKEND!r} backend instead of "
            f"Inductor, but no backend of that name is registered: import workbench (or install "
            f"the package, whose entry point declares it)") from None


def install(patcher: Patcher) -> None:
    original = torch.compile

    def compile(model=None, *, backend=_DEFAULT, mode=None, options=None, **kwargs):
        if backend == _DEFAULT:
            supported_modes = getattr(routed_backend(), "supported_modes", ())
            backend = ROUTED_BACKEND
            if options:
                log.warning("torch.compile options %s are Inductor's; ignored under CUDA emulation", options)
                options = None
            if mode is not None and mode not in supported_modes:
                log.warning("torch.compile mode %r is not supported by the %s backend; ignored",
                            mode, backend)
                mode = None
        return original(model, backend=backend, mode=mode, options=options, **kwargs)

    compile.__doc__ = original.__doc__
    patcher.setattr(torch, "compile", compile)
