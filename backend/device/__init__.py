"""PyTorch integration: the ``neuron`` device (PrivateUse1), host fallback accounting,
allocator statistics and the ``torch.neuron`` module.

- ``registration``: makes ``torch.device("neuron")`` work, once per process (``factories``,
  ``pinned``, ``generator`` and ``autocast`` are what it registers).
- ``tensor``: ``DeviceTensor``, a wrapper whose values live in one host tensor (saved and
  loaded through ``serialization``, hooked in on import); ``dispatch``
  runs every aten op on it (unwrap, host kernel, wrap, report) and installs itself as
  ``DeviceTensor.__torch_dispatch__`` on import, so the two do not import each other.
- ``device_module``: the ``torch.cuda``-shaped API shared by ``torch.neuron``
  (``neuron_module``) and the emulated ``torch.cuda`` (``cuda_emulation/``); ``memory``,
  ``events``, ``numerics``, ``timing_only`` hold what it reports and switches.
- ``state``: registration flags, ``torch.library`` handles and save/load/pin notes in one object.

Ops run here are reported to the op stream one layer down (``backend.recording``); ``op_stream``
tells that layer the selected target and the hardware-numerics tags.
"""
from backend.sim.presets import DEFAULT_NEURON_TARGET

# Imported for what they register: dispatch installs DeviceTensor.__torch_dispatch__, op_stream
# registers with backend.recording, set_data makes ``tensor.data = device_tensor`` work.
from . import dispatch, op_stream, set_data  # noqa: F401
from .registration import is_registered, register
from .tensor import DeviceTensor

__all__ = ["register", "is_registered", "DeviceTensor", "set_target", "get_target"]


def set_target(name=DEFAULT_NEURON_TARGET, lnc: int | None = None):
    """Select the simulated NeuronCore target (``trn1``, ``trn2``, ``trn3`` or a derived config),
    optionally at logical-core config ``lnc`` (see ``torch.neuron.set_target``)."""
    from .neuron_module import set_target as _set

    return _set(name, lnc)


def get_target():
    from .neuron_module import get_target as _get

    return _get()
