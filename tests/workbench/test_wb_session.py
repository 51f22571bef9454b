"""profile() and compare() against the real neuron device's op stream.

The NeuronCore EagerSession may not exist yet in every checkout; the GPU session is a real sink
with the same interface, so the wiring is tested with it and with EagerSession where present.
"""
from __future__ import annotations

import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend.sim.gpu import GpuSession
from workbench import session
from workbench.comparison import Comparison, compare
from workbench.session import ProfileSession, default_device, profile


@pytest.fixture
def gpu_sink(monkeypatch):
    """Cost neuron-device ops with the GPU session (a real sink), whatever the device."""
    made = []

    def make(device, target=None):
        made.append((device, target))
        return GpuSession("h100")

    monkeypatch.setattr(session, "make_sink", make)
    return made


def _work(device="neuron"):
    a = torch.ones(64, 64, device=device)
    return torch.relu(a @ a).sum()


def test_context_manager_records_device_ops_with_sources(gpu_sink):
    with profile(target="trn2") as prof:
        _work()
    assert gpu_sink == [("neuron", "trn2")]
    names = list(prof.ops["name"])
    assert "aten::mm" in names and "aten::relu" in names and "aten::sum" in names
    assert prof.meta["wall_time_s"] > 0 and prof.meta["target"] == "trn2"
    assert all(src and "test_wb_session.py" in src for src in prof.ops["source"])
    assert prof.summary["total_time"] > 0


def test_callable_form_returns_the_result_and_counts_ops(gpu_sink):
    counts = []
    prof = profile(_work, "neuron", on_op=counts.append)
    assert prof.result.cpu().item() == pytest.approx(64.0 * 64 * 64)
    assert counts and counts[-1] == len(prof.ops)


def test_ops_outside_the_block_are_not_recorded(gpu_sink):
    a = torch.ones(8, device="neuron")
    with profile() as prof:
        b = a + 1
    _ = b * 2
    assert list(prof.ops["name"]) == ["aten::add"]


def test_an_exception_keeps_the_partial_profile(gpu_sink):
    with pytest.raises(RuntimeError, match="boom"):
        with profile() as prof:
            _work()
            raise RuntimeError("boom")
    assert len(prof.ops) >= 3 and prof.meta["error"] == "RuntimeError: boom"


def test_graphs_compiled_during_the_block_are_attached(gpu_sink, monkeypatch):
    registry = [{"name": "old", "nodes": []}]
    monkeypatch.setattr(session, "compiled_graphs", lambda: list(registry))
    with profile() as prof:
        registry.append({"name": "new", "nodes": [{"name": "x"}]})
    assert [g.name for g in prof.graphs] == ["new"]
    prof = profile(lambda: None, graphs_since=0)
    assert [g.name for g in prof.graphs] == ["old", "new"]


def test_registry_entries_expand_to_one_graph_per_part():
    from workbench.graphs import expand_graphs

    class Info:
        parts = {"forward": 1, "backward": 2}

        def graph_dict(self, part):
            return {"name": f"g/{part}", "nodes": [{"name": "a", "group": "k0"}], "kernel_cost_ns": {"k0": 5.0}}

    graphs = expand_graphs([Info()])
    assert [g.name for g in graphs] == ["g/forward", "g/backward"]
    assert graphs[0].nodes[0].cost_ns == 5.0


def test_cpu_has_no_simulator():
    with pytest.raises(ValueError, match="compare"):
        ProfileSession("cpu")


def test_default_device_sets_and_restores():
    before = torch.get_default_device()
    with default_device("neuron"):
        assert torch.empty(1).device.type == "neuron"
    assert torch.get_default_device() == before


def test_compare_reports_cpu_wall_time_and_simulated_time(gpu_sink):
    seen = []

    def fn(device):
        seen.append(device)
        return _work(device).cpu()

    result = compare(fn, devices=("cpu", "neuron"))
    assert isinstance(result, Comparison)
    frame = result.frame.set_index("label")
    assert list(frame.index) == ["cpu", "neuron trn2"]
    assert frame.loc["cpu", "time_kind"] == "measured host wall time" and frame.loc["cpu", "time_s"] > 0
    assert frame.loc["neuron trn2", "time_kind"] == "simulated"
    assert frame.loc["neuron trn2", "op_count"] == len(result.profiles["neuron trn2"].ops)
    assert result.profiles["cpu"] is None
    assert result.results["cpu"].item() == result.results["neuron trn2"].item()
    assert seen.count("cpu") == 3 and seen.count("neuron") == 1
    assert "measured host wall time" in result._repr_html_()
    assert result.figure().data


def test_compare_without_argument_uses_the_default_device(gpu_sink):
    devices = []
    compare(lambda: devices.append(torch.empty(1).device.type), devices=("neuron",), targets=["trn1", "h100"])
    assert devices == ["neuron"] and gpu_sink == [("neuron", "trn1")]


def test_real_neuron_session():
    with profile(target="trn2") as prof:
        _work()
    assert prof.trace.device_kind == "neuron" and prof.summary["tensor_engine_active_time_percent"] > 0
    assert set(prof.timeline) >= {"tensor"}


def test_allocation_timeline_is_sampled_from_the_device(gpu_sink):
    from backend.device.memory import memory_for
    torch.ones(1, device="neuron")                       # the pool exists from the first tensor on
    base = memory_for("neuron").allocated_bytes
    with profile() as prof:
        a = torch.ones(256, 256, device="neuron")
        b = a @ a
        del a
        c = b + 1
    timeline = prof.memory["hbm_timeline"]
    # One sample per change of the allocated bytes, at the end of the op that changed it.
    assert list(timeline["time_ns"]) == list(prof.ops["end_ns"][:2])
    assert timeline["allocated_bytes"].iloc[-1] == memory_for("neuron").allocated_bytes
    mib_quarter = 256 * 256 * 4
    assert list(timeline["allocated_bytes"] - base) == [mib_quarter, 2 * mib_quarter]
    del b, c
