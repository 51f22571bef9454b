"""One registry of hardware kinds: every kind's presets, default, device and session agree."""
import importlib

import pytest

from backend.sim import hardware_kinds as kinds
from backend.sim.presets import DEFAULT_TARGETS, get_target, list_presets


@pytest.mark.parametrize("hardware", kinds.KINDS.values(), ids=lambda k: k.name)
def test_kind_is_consistent(hardware):
    presets = list_presets(hardware.name)
    assert hardware.default_target in presets
    assert get_target(kind=hardware.name).name == hardware.default_target == DEFAULT_TARGETS[hardware.name]
    assert all(config.kind == hardware.name for config in presets.values())
    assert kinds.for_device(hardware.device) is hardware
    assert kinds.for_device(hardware.host_device).host_device == hardware.host_device   # the host is a device
    module, cls, _ = hardware.session
    assert hasattr(importlib.import_module(module), cls)


def test_unknown_names_say_what_is_known():
    with pytest.raises(ValueError, match="simulated devices: neuron, cuda, tpu"):
        kinds.for_device("xla")
    with pytest.raises(ValueError, match="known: neuron, gpu, tpu"):
        kinds.kind("npu")
