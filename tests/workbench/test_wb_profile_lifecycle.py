"""One ``wb.profile()`` object's runs: each ``with`` gives its own Profile, results only after
the block, and the NeuronCore target comes back however overlapping profiles end."""
from __future__ import annotations

import threading

import pytest
import torch

import workbench as wb


def _ops(n: int) -> None:
    x = torch.ones(8, 8, device="neuron")
    for _ in range(n):
        x = torch.sin(x)


def test_reused_profile_object_gives_a_new_profile_per_run(neuron):
    session = wb.profile()
    with session as first:
        _ops(2)
    with session as second:
        _ops(5)
    assert first is not second
    assert list(first.ops["name"]).count("aten::sin") == 2
    assert list(second.ops["name"]).count("aten::sin") == 5


def test_nested_reentry_of_one_profile_object_is_refused(neuron):
    session = wb.profile()
    with session as outer:
        with pytest.raises(RuntimeError, match="already recording"):
            with session:
                pass
        _ops(3)
    assert list(outer.ops["name"]).count("aten::sin") == 3
    with session as again:        # usable after the refusal
        _ops(1)
    assert list(again.ops["name"]).count("aten::sin") == 1


@pytest.mark.parametrize("read", [
    lambda p: p.summary, lambda p: p.ops, lambda p: p.trace, lambda p: p.instructions,
    lambda p: p.memory, lambda p: p.fallbacks, lambda p: p.timeline, lambda p: p.time_band(),
], ids=["summary", "ops", "trace", "instructions", "memory", "fallbacks", "timeline", "time_band"])
def test_results_read_inside_the_block_raise(neuron, read):
    with wb.profile() as prof:
        _ops(2)
        with pytest.raises(RuntimeError, match="after the `with` block ends"):
            read(prof)
        assert "recording" in repr(prof)           # repr (debuggers, notebooks) still works
        assert "recording" in prof._repr_html_()
    assert prof.summary["total_time"] > 0 and list(prof.ops["name"]).count("aten::sin") == 2


@pytest.mark.parametrize("first_to_end", ["trn1", "trn3"])
def test_overlapping_profiles_on_two_threads_restore_the_target(neuron, first_to_end):
    """Two threads profile on different targets with overlapping blocks, ending in either
    order: each profile costs its own target and the process is back on trn2 afterwards."""
    entered = {t: threading.Event() for t in ("trn1", "trn3")}
    leave = {t: threading.Event() for t in ("trn1", "trn3")}
    profiles, errors = {}, []

    def worker(target):
        try:
            with wb.profile(target=target) as prof:
                _ops(4)
                entered[target].set()
                assert leave[target].wait(60)
            profiles[target] = prof
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
            entered[target].set()

    threads = {}
    for target in ("trn1", "trn3"):       # trn1 enters first, trn3 while it is open
        threads[target] = threading.Thread(target=worker, args=(target,))
        threads[target].start()
        assert entered[target].wait(60)
    last_to_end = "trn3" if first_to_end == "trn1" else "trn1"
    for target in (first_to_end, last_to_end):
        leave[target].set()
        threads[target].join()
    assert not errors
    assert torch.neuron.get_target().name == "trn2"
    for target, prof in profiles.items():
        assert prof.meta["target"] == target and prof.trace.target.startswith(target)
        assert list(prof.ops["name"]).count("aten::sin") == 4
