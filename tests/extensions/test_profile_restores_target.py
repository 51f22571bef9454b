"""``%%neuron_profile --target X`` leaves the selected NeuronCore target as it found it."""
import pytest

from backend.device.neuron_module import get_target, set_target
from workbench.devices import DeviceState, active_device


@pytest.fixture
def on_trn2(small):
    set_target("trn2")
    yield small
    set_target("trn2")


@pytest.mark.parametrize("cell", ["y = model(x)\n", "y = model(x)\nraise ValueError('cell failed')\n"])
def test_profile_with_a_target_restores_the_global_target(on_trn2, cell):
    try:
        on_trn2.run_cell_magic("neuron_profile", "-q --target trn1", cell)
    except ValueError:
        pass
    assert get_target().name == "trn2" and active_device() == DeviceState()


def test_profile_on_the_active_neuron_device_with_another_target_restores_it(on_trn2):
    on_trn2.run_line_magic("neuron_device", "neuron --target trn3")
    prof = on_trn2.run_cell_magic("neuron_profile", "-o -q --target trn1", "y = model(x)\n")
    assert prof.summary["target"] == "trn1"
    assert get_target().name == "trn3" and active_device() == DeviceState("neuron", "trn3")
