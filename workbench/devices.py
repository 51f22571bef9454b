"""Which device unchanged model code runs on: CPU, the simulated NeuronCore, emulated CUDA or a TPU.

``set_device("neuron", target="trn2")`` makes new tensors and modules land on ``neuron`` (the
default device); ``set_device("cuda", target="h100")`` turns CUDA emulation on so CUDA-written
code runs unmodified (``redirect=True`` runs it on ``neuron`` instead); ``set_device("cpu")``
restores torch as it was. ``set_device("tpu", target="v6e")`` runs the model on the ``neuron``
device (values as on CPU) and makes profiles default to the TPU cost model (compiled XLA path).
``use_device(...)`` does the same for a block. ``timing_only=True`` makes new device tensors
hold shapes but no values (``torch.neuron.timing_only()``).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace

import torch

from backend.sim import hardware_kinds as kinds

__all__ = ["DEVICES", "HOST_DEVICE", "DeviceState", "DeviceSelection", "SELECTION", "set_device", "use_device",
           "active_device", "move", "available"]

DEVICES = ("cpu", *kinds.devices())
# Cost models without a PyTorch device of their own run the model on this device.
HOST_DEVICE = {k.device: k.host_device for k in kinds.KINDS.values() if k.host_device != k.device}


@dataclass(frozen=True)
class DeviceState:
    device: str = "cpu"
    target: str | None = None      # trn1/trn2/trn3 for neuron, a100/h100/h200 for cuda, v5e/v5p/v6e for tpu
    redirect: bool = False         # cuda code running on neuron
    timing_only: bool = False      # new device tensors hold shapes, not values

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cpu" if self.device == "cpu" else f"{self.runs_on}:0")

    @property
    def runs_on(self) -> str:
        """The PyTorch device the model's tensors live on (a TPU's: ``neuron``)."""
        return HOST_DEVICE.get(self.device, self.device)

    def status_line(self) -> str:
        if self.device == "cpu":
            return "cpu (host eager, no simulation)"
        mode = ", timing-only: shapes, no values" if self.timing_only else ""
        if self.device == "neuron":
            return f"neuron:0 (simulated {self.target} NeuronCore{mode})"
        hardware = kinds.for_device(self.device)
        if hardware.host_device != self.device:
            from backend.sim.tpu import COMPILED_PATH_NOTE
            note = f"{COMPILED_PATH_NOTE}{mode}" if hardware.compiled_timing else mode.removeprefix(", ")
            return f"{hardware.host_device}:0 timed as a {hardware.label} {self.target} ({note})"
        where = "redirected to the neuron device" if self.redirect else f"emulated {self.target} GPU"
        return f"cuda:0 ({where}{mode})"


class DeviceSelection:
    """The device state ``set_device`` last applied, process-wide."""

    def __init__(self) -> None:
        self.current = DeviceState()
        self.hugging_face_device: str | None = None   # the $ACCELERATE_TORCH_DEVICE set_device wrote

    def reset(self) -> None:
        """Forget the selection (tests); torch itself is put back by ``set_device("cpu")``."""
        self.current = DeviceState()


SELECTION = DeviceSelection()


def active_device() -> DeviceState:
    from backend.device.timing_only import is_timing_only

    # The mode can also be switched by torch.neuron.timing_only(): report (and restore) it as it is.
    current = SELECTION.current
    return current if current.timing_only == is_timing_only() else replace(current, timing_only=is_timing_only())


def available() -> dict:
    """Devices and the targets each accepts."""
    from backend.sim.presets import list_presets

    return {"cpu": [], **{k.device: sorted(list_presets(k.name)) for k in kinds.KINDS.values()}}


def set_device(device: str, target: str | None = None, *, redirect: bool = False,
               timing_only: bool = False) -> DeviceState:
    """Make ``device`` the one that new tensors and modules land on. Returns the new state.

    ``timing_only``: tensors made on the device from now on hold no values, only what the
    simulator times (shapes, dtypes, strides); ``False`` leaves the mode.

    The switch is atomic: if it fails or is interrupted (Ctrl-C) part-way, torch is put back
    as it was (CUDA emulation, default device, NeuronCore target) before the error propagates.
    """
    from backend.device.neuron_module import get_target
    from backend.sim.presets import get_target as preset

    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "cpu" and target is not None:
        raise ValueError("the cpu device takes no target")
    if redirect and device != "cuda":
        raise ValueError("redirect applies to cuda only (CUDA-written code run on neuron)")
    if timing_only and device == "cpu":
        raise ValueError("timing-only applies to the simulated devices (neuron, cuda); the cpu computes values")
    neuron_config = get_target()
    if device != "cpu":
        hardware = kinds.for_device(device)
        config = preset(target or hardware.default_target, kind=hardware.name)   # validates before anything changes
        target = config.name
        if device == "neuron":
            neuron_config = config
    return _switch(DeviceState(device, target, redirect, timing_only), neuron_config)


def _switch(state: DeviceState, neuron_config) -> DeviceState:
    """Put torch in ``state`` with ``neuron_config`` selected, or back where it was on any error."""
    from backend.device.neuron_module import get_target

    previous = (active_device(), get_target())
    try:
        _apply(state, neuron_config)
    except BaseException:
        _apply(*previous)
        raise
    return state


def _apply(state: DeviceState, neuron_config) -> None:
    from backend.device import cuda_emulation
    from backend.device.neuron_module import get_target, set_target
    from backend.device.timing_only import set_timing_only

    if cuda_emulation.is_enabled():
        cuda_emulation.disable()
    # Select the NeuronCore before emulation starts: selecting it later reconfigures its pools.
    if state.device == "neuron" or state.redirect or get_target() is not neuron_config:
        set_target(neuron_config)
    if state.device == "cuda":
        cuda_emulation.enable(state.target, redirect=state.redirect)
    torch.set_default_device(None if state.device == "cpu" else f"{state.runs_on}:0")
    set_timing_only(state.timing_only)
    _point_hugging_face_at(state)
    SELECTION.current = state


def _point_hugging_face_at(state: DeviceState) -> None:
    """accelerate and transformers count ``neuron`` available only with AWS's torch_neuronx and
    otherwise train on CPU; both take the device from ``$ACCELERATE_TORCH_DEVICE`` (docs/stack.md).
    Point it at ``neuron`` while the model runs there, unset it after; a value set by anyone
    else stays. (Emulated CUDA needs nothing: they find ``torch.cuda`` available.)"""
    from backend.device.autoload import HF_DEVICE_ENV

    current = os.environ.get(HF_DEVICE_ENV)
    if current is not None and current != SELECTION.hugging_face_device:
        return
    wanted = "neuron" if state.runs_on == "neuron" else None
    if wanted is None:
        os.environ.pop(HF_DEVICE_ENV, None)
    else:
        os.environ[HF_DEVICE_ENV] = wanted
    SELECTION.hugging_face_device = wanted


@contextlib.contextmanager
def use_device(device: str, target: str | None = None, *, redirect: bool = False, timing_only: bool = False):
    """``with use_device("neuron", "trn1"):`` run a block on a device, then restore the previous
    one, the previously selected NeuronCore target and timing-only mode (also when the block raises)."""
    from backend.device.neuron_module import get_target

    previous = (active_device(), get_target())
    state = set_device(device, target, redirect=redirect, timing_only=timing_only)
    try:
        yield state
    finally:
        _switch(*previous)


def move(namespace: dict, names, device: str | torch.device | None = None) -> list[str]:
    """Move named modules/tensors of ``namespace`` (e.g. a notebook's globals) to ``device``.

    Modules move in place (``Module.to``); tensors are rebound to their moved copy. Returns the
    names moved; an unknown name or a value that is neither raises ``ValueError``.
    """
    device = device or active_device().torch_device
    moved = []
    for name in names:
        if name not in namespace:
            raise ValueError(f"nothing named {name!r} to move")
        value = namespace[name]
        if isinstance(value, torch.nn.Module):
            try:
                value.to(device)
            except RuntimeError as exc:
                if "swap" not in str(exc):
                    raise
                # Module.to swaps each parameter's TensorImpl, which torch refuses while an
                # earlier output's autograd graph still references the parameter.
                raise RuntimeError(
                    f"cannot move {name!r}: an earlier output still holds its autograd graph. "
                    f"Delete those outputs (e.g. `del y`) or compute them under torch.no_grad(), "
                    f"then move again.") from exc
        elif isinstance(value, torch.Tensor):
            namespace[name] = value.to(device)
        else:
            raise ValueError(f"{name!r} is a {type(value).__name__}, not a tensor or module")
        moved.append(name)
    return moved
