"""Timing events on ``neuron``, as a CUDA script times a region: ``torch.neuron.Event`` and
``torch.Event("neuron", enable_timing=True)`` give the simulated time of what ran between them,
inside a profile or not."""
import gc

import pytest
import torch

import workbench as wb
from backend import recording


def _work(x):
    return (x @ x).relu().sum()


def _time(make_event, work):
    start, end = make_event(), make_event()
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


@pytest.mark.parametrize("make_event", [lambda: torch.neuron.Event(enable_timing=True),
                                        lambda: torch.Event("neuron", enable_timing=True)],
                         ids=["torch.neuron.Event", "torch.Event"])
def test_events_time_the_simulated_work_between_them_outside_a_profile(neuron, make_event):
    x = torch.randn(128, 128, device=neuron)
    sinks = len(recording.STREAM.sinks)
    one = _time(make_event, lambda: _work(x))
    three = _time(make_event, lambda: [_work(x) for _ in range(3)])
    assert 0 < 2 * one < three <= 3 * one * (1 + 1e-9)  # the ops of successive runs may overlap
    assert _time(make_event, lambda: None) == 0.0
    with wb.profile() as prof:
        inside = _time(make_event, lambda: _work(x))
    assert inside == pytest.approx(one, rel=1e-6)   # the same simulation a profile runs
    assert prof.summary["total_time"] > 0
    gc.collect()
    assert len(recording.STREAM.sinks) == sinks      # no event left: no background simulation


def test_events_of_different_timelines_or_without_timing_refuse(neuron):
    x = torch.ones(8, device=neuron)
    for make_event in (lambda: torch.neuron.Event(enable_timing=True),
                       lambda: torch.Event("neuron", enable_timing=True)):
        outside = make_event()
        outside.record()
        with wb.profile():
            inside = make_event()
            x + x
            inside.record()
        with pytest.raises(RuntimeError, match="different simulated timelines"):
            outside.elapsed_time(inside)
    with pytest.raises(ValueError, match="enable_timing"):
        torch.Event("neuron").elapsed_time(torch.Event("neuron"))
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.neuron.Event().elapsed_time(torch.neuron.Event())
    assert _time(lambda: torch.neuron.Event(enable_timing=True), lambda: x + x) > 0   # still usable
