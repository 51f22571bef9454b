"""Slice writes into a compiled graph's inputs (a KV cache's new slots) run in place: values as on
CPU, and the time of writing the slots, not of copying the whole buffer twice."""
import pytest
import torch

import backend.compile
from backend import recording
from backend.sim.gpu.timeline import GpuSession


def write_slots(cache: torch.Tensor, new: torch.Tensor, start: int) -> torch.Tensor:
    """A slot write as Hugging Face's caches write it (through a full leading slice), then a read."""
    cache[:, :, start:start + new.shape[2]].copy_(new)
    return cache[:, :, :start + new.shape[2]].sum(dim=2)


def two_layers_one_buffer(cache: torch.Tensor, new: torch.Tensor, start: int) -> torch.Tensor:
    """Two layers writing their slots into one shared buffer, each reading it after its write."""
    end = start + new.shape[2]
    cache[:, :, start:end].copy_(new)
    first = cache[:, :, :end].sum(dim=2)
    cache[:, :, start:end].copy_(new * 2)
    return first + cache[:, :, :end].sum(dim=2)


def write_then_read_old(cache: torch.Tensor, new: torch.Tensor, start: int) -> torch.Tensor:
    """Reads the input again after the write, through the name of the old value: still the new one."""
    before = cache.clone()
    cache[:, :, start:start + 1].copy_(new)
    return cache.sum() - before.sum()


def _timed(f, device, batch: int, start: int, context: int = 64):
    torch.manual_seed(0)
    cache, new = torch.randn(batch, 2, context, 16), torch.randn(batch, 2, 1, 16)
    expected_cache = cache.clone()
    expected = f(expected_cache, new, start)
    on_device, new_on_device = cache.to(device), new.to(device)
    f(on_device.clone(), new_on_device, start)             # compile, lay out
    session = GpuSession()
    with recording.recording(session):
        out = f(on_device, new_on_device, start)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(on_device.cpu(), expected_cache)
    return session.trace.ops


def _kernel_ns(ops) -> float:
    return sum(op.end_ns - op.start_ns for op in ops if op.kind == "kernel")


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_slot_write_into_an_input_runs_in_place(neuron, dynamic):
    ops = _timed(torch.compile(write_slots, backend="neuron", dynamic=dynamic), neuron, 4, 9)
    assert not any("scatter" in op.name for op in ops)
    written = [op for op in ops if op.kind == "kernel" and op.name.endswith("copy_")]
    (write,) = written
    assert write.hbm_write_bytes + write.l2_write_bytes == 4 * 2 * 1 * 16 * 4     # the new slots, float32


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_chain_of_writes_into_one_input_runs_in_place(neuron, dynamic):
    ops = _timed(torch.compile(two_layers_one_buffer, backend="neuron", dynamic=dynamic), neuron, 4, 9)
    assert not any("scatter" in op.name for op in ops)
    assert sum(op.kind == "kernel" and op.name.endswith("copy_") for op in ops) == 2


def test_the_write_costs_the_slots_not_the_buffer(neuron):
    """Eight times the context costs the same write: only the read grows."""
    f = torch.compile(write_slots, backend="neuron", dynamic=False)
    short, long = (_timed(f, neuron, 4, 9, context) for context in (64, 512))
    write_ns = lambda ops: sum(op.end_ns - op.start_ns for op in ops if op.name.endswith("copy_"))
    assert write_ns(long) == pytest.approx(write_ns(short), rel=1e-6)


def test_symbolic_and_static_graphs_cost_the_same_write(neuron):
    dynamic = _timed(torch.compile(write_slots, backend="neuron", dynamic=True), neuron, 4, 9)
    torch._dynamo.reset()
    backend.compile.register()
    static = _timed(torch.compile(write_slots, backend="neuron", dynamic=False), neuron, 4, 9)
    assert _kernel_ns(dynamic) == pytest.approx(_kernel_ns(static), rel=1e-9)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_input_read_after_its_write_keeps_cpu_values(neuron, dynamic):
    _timed(torch.compile(write_then_read_old, backend="neuron", dynamic=dynamic), neuron, 2, 5)
