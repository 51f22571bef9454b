"""The kinds of hardware the workbench simulates: one registry every layer asks.

A kind says where its presets live and which is the default, which device name a user selects
it with (``set_device``, ``profile(device=...)``, ``"tpu:v6e"``), which PyTorch device the
model's tensors live on while it is timed (a TPU's run on ``neuron``: it has no PyTorch device
here), which simulator session costs its ops, and whether its timing is always the compiled
(whole-graph) path. Adding a kind is one entry here plus its presets and session.

Sessions are named as (module, class) data, not imported: the simulator layer never imports the
lowering layer above it; ``workbench.session.make_sink`` imports them.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HardwareKind", "KINDS", "kind", "for_device", "devices", "default_target"]


@dataclass(frozen=True)
class HardwareKind:
    name: str                       # the presets' ``kind`` field: "neuron", "gpu", "tpu"
    device: str                     # what a user selects: "neuron", "cuda", "tpu"
    host_device: str                # the PyTorch device the model runs on while timed
    default_target: str
    presets: tuple[str, str]        # (module, attribute) of the name -> preset table
    session: tuple[str, str, str]   # (module, class, keyword naming the target) of the cost session
    label: str                      # for status lines and errors: "NeuronCore", "GPU", "TPU"
    compiled_timing: bool = False   # timing always uses the compiled whole-graph path (XLA)


KINDS: dict[str, HardwareKind] = {k.name: k for k in (
    HardwareKind("neuron", "neuron", "neuron", "trn2", ("backend.sim.presets", "TARGETS"),
                 ("backend.lowering", "EagerSession", "target"), "NeuronCore"),
    HardwareKind("gpu", "cuda", "cuda", "h100", ("backend.sim.gpu.presets", "PRESETS"),
                 ("backend.sim.gpu", "GpuSession", "preset"), "GPU"),
    HardwareKind("tpu", "tpu", "neuron", "v6e", ("backend.sim.tpu.presets", "PRESETS"),
                 ("backend.sim.tpu", "TpuSession", "preset"), "TPU", compiled_timing=True),
)}
_BY_DEVICE = {k.device: k for k in KINDS.values()}


def kind(name: str) -> HardwareKind:
    """A kind by its preset kind name ("neuron", "gpu", "tpu")."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown preset kind {name!r}; known: {', '.join(KINDS)}") from None


def for_device(device: str) -> HardwareKind:
    """The kind a simulated device name selects ("neuron", "cuda", "tpu")."""
    try:
        return _BY_DEVICE[device]
    except KeyError:
        raise ValueError(f"no simulator for device {device!r}; simulated devices: {', '.join(_BY_DEVICE)}") from None


def devices() -> tuple[str, ...]:
    """The simulated device names, NeuronCore first."""
    return tuple(_BY_DEVICE)


def default_target(device: str) -> str:
    return for_device(device).default_target
