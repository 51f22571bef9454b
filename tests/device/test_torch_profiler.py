"""torch.profiler shows the simulated NeuronCore as a device: per-op device time in
``key_averages()``, kernels on the device's track in the Chrome trace, linked to the ops that
launched them -- written the way the PyTorch profiler recipe writes it."""
from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import workbench as wb
from backend.device.profiler import profiler_installed
from backend.device.profiler_timeline import kernel_name

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).to(device)


def _step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


@pytest.fixture(scope="module")
def profiled():
    """One training step under torch.profiler, also timed by wb.profile on the same ops."""
    assert profiler_installed(), "the neuron device's Kineto profiler was not built"
    torch.neuron.set_target("trn2")
    model = _model("neuron")
    x = torch.randn(8, 64, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        with wb.profile() as sim:
            with record_function("train_step"):
                _step(model, x)
    return prof, sim


def _by_name(prof) -> dict:
    """key_averages() rows summed by op name (the rows of one name split by overload)."""
    out: dict = {}
    for row in prof.key_averages():
        total, own = out.get(row.key, (0.0, 0.0))
        out[row.key] = (total + row.device_time_total, own + row.self_device_time_total)
    return out


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_each_op_gets_its_simulated_time(profiled):
    prof, sim = profiled
    # The same ops in the same order as wb.profile times them, each with its simulated duration.
    work = sim.ops[~sim.ops["kind"].isin(["view", "wait"])]
    kernels = _device_events(prof)
    assert [e.name for e in kernels] == [kernel_name(n, k) for n, k in zip(work["name"], work["kind"])]
    for event, ns in zip(kernels, work["end_ns"] - work["start_ns"]):
        assert event.time_range.elapsed_us() == pytest.approx(ns / 1000, abs=2e-3)
    # Per-op device time sums to the simulated busy time, with nothing dropped or counted twice.
    averages = prof.key_averages()
    launched_by_ops = sum(a.self_device_time_total for a in averages if a.key.startswith("aten::"))
    kernel_rows = sum(a.self_device_time_total for a in averages if a.key.startswith("neuron::"))
    busy_us = float((work["end_ns"] - work["start_ns"]).sum()) / 1000
    assert launched_by_ops == pytest.approx(busy_us, abs=0.01)
    assert kernel_rows == pytest.approx(busy_us, abs=0.01)
    # The device track is the simulated timeline, gaps included (where the NeuronCore waited for
    # the host to launch the next op): kernels start where the simulator starts them.
    first = kernels[0].time_range.start - work["start_ns"].iloc[0] / 1000
    for event, start_ns in zip(kernels, work["start_ns"]):
        assert event.time_range.start - first == pytest.approx(start_ns / 1000, abs=2e-3)


def test_device_time_belongs_to_the_aten_op_not_its_python_dispatch(profiled):
    prof, _ = profiled
    times = _by_name(prof)
    assert times["aten::addmm"][1] > 0
    assert times["aten::mm"][1] > 0                                 # the backward's matmuls
    assert times["PythonSubclass"][1] == 0
    assert times["aten::linear"][0] == pytest.approx(times["aten::addmm"][1])
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "Self NEURON" in table and "neuron::" in table


def test_the_chrome_trace_has_kernels_linked_to_their_launches(profiled, tmp_path):
    prof, _ = profiled
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "privateuse1_runtime"}
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    assert kernels and len(kernels) == len(launches)
    for kernel in kernels:
        assert kernel["pid"] == 0 and kernel["tid"] == kernel["args"]["stream"] == 1
        launch = launches[kernel["args"]["correlation"]]
        assert launch["args"]["External id"] == kernel["args"]["External id"]
        assert ops[kernel["args"]["External id"]]["name"].startswith("aten::")
        assert kernel["name"].startswith("neuron::")
    flows = [e for e in events if e.get("cat") == "ac2g"]
    assert sorted(e["ph"] for e in flows) == ["f"] * len(kernels) + ["s"] * len(kernels)
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "neuron (simulated trn2)" in names


def test_a_cpu_only_profile_simulates_nothing(neuron):
    model, x = _model(neuron), torch.randn(8, 64, device=neuron)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _step(model, x)
    assert not _device_events(prof)
    assert all(a.self_device_time_total == 0 for a in prof.key_averages())


def test_every_active_step_of_a_schedule_has_its_device_time(neuron, tmp_path):
    model, x = _model(neuron), torch.randn(8, 64, device=neuron)
    traces = []
    with profile(activities=DEVICE_ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=1, repeat=2),
                 on_trace_ready=lambda p: traces.append(sum(a.self_device_time_total for a in p.key_averages()
                                                            if a.key.startswith("aten::")))) as prof:
        for _ in range(6):
            _step(model, x)
            prof.step()
    # Two active windows of one identical step each: the same simulated time, and not zero.
    assert len(traces) == 2 and traces[0] > 0 and traces[0] == pytest.approx(traces[1], abs=1e-3)


def test_an_error_in_the_profiled_block_leaves_the_device_usable(neuron):
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        with profile(activities=DEVICE_ACTIVITIES):
            torch.randn(2, 3, device=neuron) @ torch.randn(4, 5, device=neuron)
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        torch.randn(2, 3, device=neuron) @ torch.randn(3, 5, device=neuron)
    assert [e.name for e in _device_events(prof)].count("neuron::mm") == 1


def test_kernel_names_are_the_ones_trace_tools_classify():
    assert kernel_name("aten::addmm", "op") == "neuron::addmm"
    assert kernel_name("aten::nonzero", "fallback") == "neuron::nonzero (host fallback)"
    assert kernel_name("collective::all_reduce", "op").startswith("ncclKernel_AllReduce ")
    assert kernel_name("aten::_to_copy", "transfer", "h2d").startswith("Memcpy HtoD ")
    assert kernel_name("aten::_to_copy", "transfer", "d2h").startswith("Memcpy DtoH ")
    assert kernel_name("aten::_to_copy", "transfer") == "Memcpy (neuron, simulated)"
    assert kernel_name("fused_add_mul_0", "kernel") == "fused_add_mul_0"


def test_compiled_kernels_are_device_work_of_the_compiled_region(neuron):
    model = torch.compile(_model(neuron), backend="neuron")
    x = torch.randn(8, 64, device=neuron)
    model(x)                                            # compiles outside the profile
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        with wb.profile() as sim:
            model(x)
    kernels = [e.name for e in _device_events(prof)]
    assert kernels and kernels == [name for name, kind in zip(sim.ops["name"], sim.ops["kind"]) if kind == "kernel"]
    times = _by_name(prof)
    assert times["CompiledFunction"][1] == pytest.approx(sum(times[name][1] for name in set(kernels)), abs=1e-3)


def test_the_legacy_profiler_times_ops_on_the_simulated_clock(neuron):
    # torch.autograd.profiler.profile(use_device=...) without Kineto asks the device's
    # ProfilerStubs for events around each op: here, times on the simulated clock.
    from backend import recording

    a, b = torch.randn(64, 64, device=neuron), torch.randn(64, 64, device=neuron)
    with torch.autograd.profiler.profile(use_device="neuron") as legacy:
        with wb.profile() as sim:
            torch.relu(a @ b)
    # An event pair measures the simulated time between an op's start and end: its device work
    # and the gaps where the device waited for launches, as CUDA event pairs do. PyTorch keeps
    # whole microseconds of it (privateuse1_elapsed_us), truncated.
    ops = sim.ops.set_index("name")
    times = _by_name(legacy)
    assert times["aten::matmul"][0] == int(ops.loc["aten::mm", "end_ns"] / 1000)
    assert times["aten::relu"][0] == int((ops.loc["aten::relu", "end_ns"] - ops.loc["aten::mm", "end_ns"]) / 1000)
    assert all(row.cpu_time_total >= 0 for row in legacy.key_averages())
    torch.relu(a)                   # the legacy profile's simulator leaves at the next op
    assert not recording.STREAM.sinks


def test_kernels_are_on_the_track_of_the_core_that_ran_them(neuron):
    try:
        torch.neuron.set_device(1)
        x = torch.randn(8, 8, device="neuron")
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            torch.relu(x)
    finally:
        torch.neuron.set_device(0)
    assert [(e.name, e.device_index) for e in _device_events(prof)] == [("neuron::relu", 1)]
