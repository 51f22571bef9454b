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
