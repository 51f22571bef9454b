"""The op stream (backend.recording): one OpRecord per executed op, nothing dropped."""
import threading

import pytest
import torch

from backend import recording


class ListSink:
    def __init__(self):
        self.records = []

    def feed(self, record):
        self.records.append(record)


def test_records_name_shapes_dtypes_and_views(neuron):
    a = torch.randn(8, 16, device="neuron")
    b = torch.randn(16, 4, device="neuron")
    sink = ListSink()
    with recording.recording(sink):
        c = torch.mm(a, b)
        v = c.view(32)
        v.add_(1.0)
        c.sum(dim=1, keepdim=True)
    names = [r.name for r in sink.records]
    assert names == ["aten::mm", "aten::view", "aten::add_", "aten::sum"]
    mm = sink.records[0]
    assert [t.shape for t in mm.inputs] == [(8, 16), (16, 4)]
    assert mm.outputs[0].shape == (8, 4) and mm.outputs[0].dtype == "float32"
    assert mm.outputs[0].nbytes == 8 * 4 * 4
    assert sink.records[1].is_view and not mm.is_view
    assert sink.records[3].attrs == {"dim": [1], "keepdim": True}
    assert [r.index for r in sink.records] == sorted(r.index for r in sink.records)


def test_transfers_are_recorded_both_ways(neuron):
    host = torch.randn(4, 4)
    sink = ListSink()
    with recording.recording(sink):
        dev = host.to("neuron")
        back = dev.cpu()
        dev.sum().item()
    kinds = [r.transfer for r in sink.records if r.transfer]
    assert kinds == ["h2d", "d2h", "d2h"]
    assert torch.equal(back, host)


def test_no_sink_no_records_and_suspend(neuron):
    sink = ListSink()
    x = torch.ones(3, device="neuron")
    x + 1  # nobody listening: nothing built
    with recording.recording(sink):
        with recording.suspended():
            x * 2
        x - 1
    assert [r.name for r in sink.records] == ["aten::sub"]


def test_training_step_records_every_op(neuron):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    sink = ListSink()
    with recording.recording(sink, with_source=True):
        model(x).sum().backward()
    names = {r.name for r in sink.records}
    assert {"aten::addmm", "aten::relu", "aten::mm", "aten::threshold_backward", "aten::sum"} <= names
    forward = [r for r in sink.records if r.name in ("aten::addmm", "aten::relu")]
    # Forward ops point at the user's line; backward ops run in autograd's engine (no frame).
    assert all(r.source.startswith(__file__) for r in forward)


def test_the_stream_reports_the_target_the_device_selected(neuron):
    # compile sizes fusion and costs kernels by this target without importing the device
    torch.neuron.set_target("trn1")
    assert recording.current_target() is torch.neuron.get_target()
    assert recording.current_target().name == "trn1"


def test_a_record_tagger_adds_attrs_and_is_registered_once(neuron):
    def tag(func, host_inputs):
        return {"seen_by_test": True} if func is torch.ops.aten.neg.default else None

    recording.record_tagger(tag)
    try:
        with pytest.raises(RuntimeError, match="already registered"):
            recording.record_tagger(tag)
        sink = ListSink()
        x = torch.ones(3, device="neuron")
        with recording.recording(sink):
            -x
            x + 1
        assert [r.attrs.get("seen_by_test") for r in sink.records] == [True, None]
    finally:
        recording.remove_tagger(tag)


def test_sinks_subscribe_from_threads_without_losing_any():
    """Sessions opened and closed on several threads leave the stream exactly as it was."""
    import threading

    before = recording.STREAM.sinks
    errors = []

    def worker():
        try:
            for _ in range(200):
                sink = ListSink()
                with recording.recording(sink):
                    assert any(s is sink for s, _ in recording.active_sinks())
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and recording.STREAM.sinks == before


def test_stream_reset_drops_sinks_and_suspension():
    stream = recording.OpStream()
    stream.subscribe((ListSink(), False))
    stream.suspend()
    stream.suspend()
    stream.reset()
    assert stream.sinks == () and not stream.suspended_here() and stream.suspended_threads == 0
    assert not stream.listening


def _record_while_other_thread(neuron, other) -> ListSink:
    """Record 300 ops on this thread while ``other(started, done)`` runs on another thread."""
    started, done = threading.Event(), threading.Event()
    errors = []

    def run_other():
        try:
            other(started, done)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=run_other)
    thread.start()
    assert started.wait(60)
    sink = ListSink()
    x = torch.ones(4, 4, device=neuron)
    with recording.recording(sink):
        for _ in range(300):
            x = torch.sin(x)
    done.set()
    thread.join()
    assert not errors
    return sink


def test_a_thread_suspended_does_not_hide_other_threads_ops(neuron):
    """A compiler tracing on one thread suspends that thread only: another thread profiling
    at the same time records every one of its ops."""
    def suspended_thread(started, done):
        with recording.suspended():
            started.set()
            assert done.wait(60)
            assert not recording.active_sinks()       # still suspended here

    sink = _record_while_other_thread(neuron, suspended_thread)
    assert [r.name for r in sink.records].count("aten::sin") == 300
    assert not recording.STREAM.suspended_threads


def test_a_thread_compiling_does_not_hide_other_threads_ops(neuron):
    """The same with torch.compile(backend="neuron") held mid-compile on the other thread."""
    from torch._dynamo.callback import callback_handler

    from backend.compile import register

    def compiling_thread(started, done):
        def hold(_args):
            if recording.STREAM.suspended_here() and not started.is_set():
                started.set()
                assert done.wait(60)

        torch._dynamo.reset()
        register()                  # installs the suspending compile-start callback first
        callback_handler.register_start_callback(hold)
        try:
            torch.compile(lambda t: (t * 2).sin().sum(), backend="neuron")(torch.ones(8, device=neuron))
        finally:
            callback_handler.remove_start_callback(hold)

    sink = _record_while_other_thread(neuron, compiling_thread)
    assert [r.name for r in sink.records].count("aten::sin") == 300
