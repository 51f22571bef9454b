"""Device switches are atomic and scoped: an interrupted switch leaves torch as it was, and
``use_device`` / ``%%neuron_profile --target`` put the NeuronCore target back afterwards."""
from __future__ import annotations

import pytest
import torch

from backend import recording
from backend.device import memory
from backend.device.cuda_emulation import emulation, guard, is_enabled
from backend.device.neuron_module import get_target, set_target
from workbench.devices import DeviceState, active_device, set_device, use_device


@pytest.fixture(autouse=True)
def from_cpu_on_trn2():
    set_device("cpu")
    set_target("trn2")
    yield
    set_device("cpu")
    set_target("trn2")


def _torch_state() -> dict:
    return {"torch.cuda": dict(vars(torch.cuda)), "torch.Tensor": dict(vars(torch.Tensor)),
            "torch.compile": torch.compile, "cuda available": torch.cuda.is_available(),
            "guard slot": guard.slot_value(), "simulated types": set(recording.SIMULATED_DEVICE_TYPES),
            "pools": dict(memory.POOLS), "sinks": list(recording.STREAM.sinks),
            "default device": torch.get_default_device(), "emulation on": is_enabled(),
            "active": active_device(), "neuron target": get_target().name}


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("step", ["cuda_api", "tensors", "autocast", "compile_routing"])
def test_interrupt_while_enabling_cuda_emulation_restores_torch(monkeypatch, step):
    before = _torch_state()
    monkeypatch.setattr(getattr(emulation, step), "install", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        set_device("cuda", "h100")
    assert _torch_state() == before


def test_interrupt_after_emulation_is_on_rolls_the_switch_back(monkeypatch):
    set_device("neuron", "trn1")
    before = _torch_state()
    real = torch.set_default_device
    calls = []

    def interrupt_first(device):
        calls.append(device)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(device)

    monkeypatch.setattr(torch, "set_default_device", interrupt_first)
    with pytest.raises(KeyboardInterrupt):
        set_device("cuda", "a100")
    assert _torch_state() == before
    assert active_device() == DeviceState("neuron", "trn1")


def test_failed_switch_between_emulated_gpus_keeps_the_first(monkeypatch):
    set_device("cuda", "h100")
    real, calls = emulation.autocast.install, []

    def interrupt_first(*args):
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(emulation.autocast, "install", interrupt_first)
    with pytest.raises(KeyboardInterrupt):
        set_device("cuda", "a100")
    assert is_enabled() and torch.cuda.is_available()
    assert active_device() == DeviceState("cuda", "h100") and "H100" in emulation.current().name


@pytest.mark.parametrize("raises", [False, True])
def test_use_device_restores_the_neuron_target(raises):
    with pytest.raises(RuntimeError) if raises else _nothing():
        with use_device("neuron", "trn1"):
            assert get_target().name == "trn1"
            if raises:
                raise RuntimeError("boom")
    assert get_target().name == "trn2" and active_device() == DeviceState()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
