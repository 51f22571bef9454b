"""PyTorch integration: the ``neuron`` device (PrivateUse1), host fallback accounting,
allocator statistics and the ``torch.neuron`` module.

Ops run here are reported to the op stream one layer down (``backend.recording``); ``op_stream``
tells that layer the selected target and the hardware-numerics tags.
"""
from backend.sim.presets import DEFAULT_NEURON_TARGET

# Imported for what they register: dispatch installs DeviceTensor.__torch_dispatch__, op_stream
# registers with backend.recording.
from . import dispatch, op_stream  # noqa: F401
from .registration import is_registered, register
from .tensor import DeviceTensor

__all__ = ["register", "is_registered", "DeviceTensor", "set_target", "get_target"]


def set_target(name=DEFAULT_NEURON_TARGET):
    """Select the simulated NeuronCore target (``trn1``, ``trn2``, ``trn3`` or a derived config)."""
    from .neuron_module import set_target as _set

    return _set(name)


def get_target():
    from .neuron_module import get_target as _get

    return _get()
