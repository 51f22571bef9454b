"""The device's event stream: one OpRecord per executed op, nothing dropped."""
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
