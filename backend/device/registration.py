"""Registering the ``neuron`` device with PyTorch, once per process."""
from __future__ import annotations

import sys

import torch

from .state import STATE

__all__ = ["register", "is_registered"]

DEVICE_NAME = "neuron"


def is_registered() -> bool:
    return STATE.registered


def register() -> None:
    """Make ``torch.device("neuron")`` a working device. Idempotent.

    PrivateUse1 is renamed to ``neuron`` and set up as a Python backend (device guard, hooks,
    ``torch.neuron``, ``Tensor.neuron()``/``Module.neuron()``); the allocators are registered
    on PrivateUse1; every other op reaches ``DeviceTensor.__torch_dispatch__``.
    """
    if STATE.registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import autocast, data_free_init, neuron_module
    from .export_dims import install_export_dims
    from .factories import register_factories
    from .generator import install_generator
    from .native_hooks import install_native_hooks
    from .pinned import register_pinned_memory
    from .profiler import install_profiler

    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_NAME):
        raise RuntimeError(
            f"PrivateUse1 is already claimed by the '{current}' backend; the workbench's "
            f"'{DEVICE_NAME}' device cannot be registered in this process.")
    if current == DEVICE_NAME and hasattr(torch, DEVICE_NAME):
        # Another copy of this module registered it (e.g. autoload then a reload).
        STATE.registered = True
        return
    install_native_hooks()   # first: PyTorch keeps the first hooks/guard registered
    install_profiler()       # torch.profiler's view of the device (warns if it cannot be built)
    _setup_privateuseone_for_python_backend(rename=DEVICE_NAME, backend_module=neuron_module)
    sys.modules.setdefault(f"torch.{DEVICE_NAME}", neuron_module)
    register_factories("PrivateUse1")
    autocast.register(DEVICE_NAME)
    install_generator()
    register_pinned_memory()
    install_export_dims()
    data_free_init.install()
    STATE.registered = True
