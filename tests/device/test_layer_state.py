"""The device layer's registrations and per-storage notes live in one object, ``state.STATE``."""
import io

import torch

from backend.device import pinned, registration, serialization
from backend.device.state import STATE, DeviceLayerState


def test_registrations_are_recorded_on_the_layer_state(neuron):
    assert STATE.registered and registration.is_registered()
    assert STATE.serialization_registered
    library = STATE.pinned_library
    assert library is not None and "PrivateUse1" in STATE.factory_libraries
    pinned.register_pinned_memory()   # idempotent: keeps the library it registered
    assert STATE.pinned_library is library


def test_reset_forgets_storage_notes_but_keeps_registrations(neuron):
    t = torch.arange(4.0, device="neuron")
    host = torch.ones(3)
    kept = host.pin_memory()
    assert kept.is_pinned() and STATE.pinned
    buffer = io.BytesIO()
    torch.save(t, buffer)
    serialization.mark_for_saving(host, torch.device("neuron:0"))
    assert STATE.saving

    fresh = DeviceLayerState()
    assert not fresh.registered and not fresh.factory_libraries

    STATE.reset()
    assert not STATE.pinned and not STATE.saving and not STATE.restored and not STATE.moved
    assert not kept.is_pinned()
    assert STATE.registered and STATE.serialization_registered and STATE.pinned_library is not None
    # the hooks still work after a reset
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded.device.type == "neuron" and torch.equal(loaded.cpu(), t.cpu())
    assert torch.ones(2).pin_memory().is_pinned()


def test_open_sinks_are_counted_per_thread_on_the_op_stream(neuron):
    from backend.recording import STREAM, recording

    class Sink:
        def feed(self, record):
            pass

    with recording(Sink()):
        with recording(Sink()):
            assert STREAM.opened.depth == 2
        assert STREAM.opened.depth == 1
    assert STREAM.opened.depth == 0
