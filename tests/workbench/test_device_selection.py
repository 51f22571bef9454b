"""The workbench's device selection is one object, ``devices.SELECTION``, with ``reset()``."""
from workbench import devices


def test_set_device_records_on_the_selection_and_reset_forgets_it():
    try:
        state = devices.set_device("neuron", "trn1")
        assert devices.SELECTION.current is state is devices.active_device()
        devices.SELECTION.reset()
        assert devices.active_device() == devices.DeviceState()
    finally:
        devices.set_device("cpu")
    assert devices.active_device().device == "cpu"


import pytest  # noqa: E402
import torch  # noqa: E402

# A GPU or TPU target on the neuron device: was "AttributeError: 'GpuConfig' object has no
# attribute 'generation'" ('TpuConfig' ... 'cores_per_chip').
SELECT_ON_NEURON = {
    "wb.set_device": lambda target: devices.set_device("neuron", target),
    "torch.neuron.set_target": lambda target: torch.neuron.set_target(target),
}


@pytest.mark.parametrize("select", SELECT_ON_NEURON.values(), ids=SELECT_ON_NEURON.keys())
@pytest.mark.parametrize("target,device", [("h100", "cuda"), ("a100", "cuda"), ("v6e", "tpu")])
def test_a_target_of_another_device_names_the_neuron_targets_and_its_device(select, target, device):
    before = torch.neuron.get_target().name
    try:
        with pytest.raises(ValueError, match=rf"known neuron targets: trn1, trn2, trn3 \('{target}' is a "
                                             rf"\w+ target: select it on the '{device}' device"):
            select(target)
        assert torch.neuron.get_target().name == before
    finally:
        devices.set_device("cpu")


def test_an_unknown_neuron_target_lists_only_neuron_targets():
    with pytest.raises(ValueError, match=r"unknown target 'trn4'; known neuron targets: trn1, trn2, trn3$"):
        torch.neuron.set_target("trn4")           # listed GPU and TPU presets too
