"""Profiles opened on different threads keep their runs apart (backend.recording's thread filter)."""
from __future__ import annotations

import threading

import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend import recording


class ListSink:
    def __init__(self):
        self.names = []

    def feed(self, record):
        self.names.append(record.name)


def _ops(kind: str, n: int, barrier: threading.Barrier) -> None:
    x = torch.ones(8, 8, device="neuron")
    barrier.wait()
    for _ in range(n):
        x = torch.sin(x) if kind == "sin" else torch.cos(x)


def test_two_threads_profiling_at_once_get_disjoint_complete_records(neuron):
    barrier = threading.Barrier(2)
    sinks = {"sin": ListSink(), "cos": ListSink()}
    errors = []

    def worker(kind):
        try:
            with recording.recording(sinks[kind]):
                _ops(kind, 200, barrier)
        except BaseException as exc:          # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sinks["sin"].names.count("aten::sin") == 200 and "aten::cos" not in sinks["sin"].names
    assert sinks["cos"].names.count("aten::cos") == 200 and "aten::sin" not in sinks["cos"].names


def test_backward_on_autograd_worker_thread_is_recorded(neuron):
    """Autograd runs a device's backward on its own worker thread: still this profile's ops."""
    x = torch.randn(4, 4, device="neuron", requires_grad=True)
    sink = ListSink()
    seen_threads = set()
    original = sink.feed

    def feed(record):
        seen_threads.add(threading.get_ident())
        original(record)

    sink.feed = feed
    with recording.recording(sink):
        torch.sin(x * 2).sum().backward()
    assert "aten::cos" in sink.names                           # sin's backward
    assert len(seen_threads) == 2                              # it did run on another thread
    assert x.grad is not None


def test_profile_of_forward_backward_counts_backward_ops(neuron):
    model = torch.nn.Linear(8, 8).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    with workbench.profile() as prof:
        model(x).sum().backward()
    names = set(prof.ops["name"])
    assert "aten::mm" in names                                  # the weight gradient
    assert model.weight.grad is not None and len(prof.ops) > 3


def test_all_threads_sink_sees_other_threads_and_thread_sink_does_not(neuron):
    everything, mine = ListSink(), ListSink()
    x = torch.ones(3, device="neuron")
    with recording.recording(everything, all_threads=True), recording.recording(mine):
        t = threading.Thread(target=lambda: torch.exp(x))
        t.start()
        t.join()
        torch.neg(x)
    assert "aten::exp" in everything.names and "aten::neg" in everything.names
    assert mine.names == ["aten::neg"]
