"""``torch.neuron.memory``'s history and snapshots are ``torch.cuda.memory``'s: the dictionary
PyTorch's memory visualizer (``torch.cuda._memory_viz``) reads, with each storage at the
address its tensors report and the Python stack that allocated it."""
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

from backend.device.memory_history import HISTORIES


@pytest.fixture
def history():
    torch.neuron.memory._record_memory_history(max_entries=10_000)
    yield
    torch.neuron.memory._record_memory_history(enabled=None)


def _allocate_weights(device):
    return torch.nn.Linear(64, 64).to(device)


def _segment(snapshot, tensor):
    return next(s for s in snapshot["segments"] if s["address"] == tensor.untyped_storage().data_ptr())


def test_a_snapshot_lists_each_storage_with_its_stack_and_trace(neuron, history):
    layer = _allocate_weights(neuron)
    temporary = torch.ones(100, device=neuron)
    address = temporary.untyped_storage().data_ptr()
    del temporary
    snapshot = torch.neuron.memory._snapshot()
    weight = _segment(snapshot, layer.weight)
    assert weight["device"] == 0 and weight["total_size"] == 64 * 64 * 4
    (block,) = weight["blocks"]
    assert block["state"] == "active_allocated" and block["requested_size"] == 64 * 64 * 4
    assert any(f["name"] == "_allocate_weights" and f["filename"] == __file__ for f in block["frames"])
    bias = _segment(snapshot, layer.bias)        # 256 bytes, reserved as CUDA rounds: 512
    assert (bias["total_size"], bias["blocks"][0]["requested_size"]) == (512, 256)
    trace = snapshot["device_traces"][0]
    freed = [e["action"] for e in trace if e["addr"] == address]
    assert freed == ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"]
    assert torch.neuron.memory.memory_snapshot() == torch.neuron.memory._snapshot()["segments"]


def test_pytorchs_memory_viz_reads_the_snapshot(neuron, history, tmp_path):
    layer = _allocate_weights(neuron)
    layer(torch.randn(8, 64, device=neuron)).sum().backward()
    snapshot = torch.neuron.memory._snapshot()
    summary = _memory_viz.segsum(snapshot)        # checks that blocks add up to segments
    assert f"segments: {len(snapshot['segments'])}" in summary
    assert "cudaMalloc" in _memory_viz.trace(snapshot) and "free completed" in _memory_viz.trace(snapshot)
    for html in (_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)):
        assert "add_local_files" in html
    lines = _memory_viz.memory(snapshot, format_flamegraph=lambda text: text)
    assert "_allocate_weights" in lines and "active_allocated" in lines
    torch.neuron.memory._dump_snapshot(str(tmp_path / "snapshot.pickle"))
    with open(tmp_path / "snapshot.pickle", "rb") as f:
        assert pickle.load(f)["segments"]


def test_history_can_stop_be_bounded_and_skip_actions(neuron):
    torch.neuron.memory._record_memory_history(max_entries=4, skip_actions=["segment_alloc"])
    try:
        for _ in range(3):
            torch.zeros(10, device=neuron)
        trace = torch.neuron.memory._snapshot()["device_traces"][0]
        assert len(trace) == 4 and not any(e["action"] == "segment_alloc" for e in trace)
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)
    assert "neuron" not in HISTORIES
    kept = torch.ones(4, device=neuron)
    snapshot = torch.neuron.memory._snapshot()
    assert not any(snapshot["device_traces"]) and _segment(snapshot, kept)["blocks"][0]["frames"] == []
    with pytest.raises(ValueError, match="enabled"):
        torch.neuron.memory._record_memory_history(enabled="sometimes")


def test_a_freed_and_reallocated_storage_is_traced_as_free_then_alloc(neuron, history):
    t = torch.ones(256, device=neuron)
    storage = t.untyped_storage()
    storage.resize_(0)                  # FSDP2 frees unsharded parameters this way
    storage.resize_(1024)
    actions = [e["action"] for e in torch.neuron.memory._snapshot()["device_traces"][0] if e["addr"] == storage.data_ptr()]
    assert actions == ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free",
                       "segment_alloc", "alloc"]


def test_the_module_imports_and_emulated_cuda_has_the_same_memory_api(neuron):
    import torch.neuron.memory as memory
    from backend.device.cuda_emulation import emulate_cuda

    assert memory.memory_allocated() == torch.neuron.memory_allocated()
    with emulate_cuda("h100"):
        torch.cuda.memory._record_memory_history()
        try:
            x = torch.ones(1000, device="cuda")
            snapshot = torch.cuda.memory._snapshot()
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        assert _segment(snapshot, x)["device"] == 0
        assert any(e["action"] == "alloc" for e in snapshot["device_traces"][0])
        assert "segments" in _memory_viz.segsum(snapshot)
        assert callable(torch.cuda.memory.caching_allocator_alloc)   # the rest is torch.cuda.memory's
    assert torch.cuda.memory._snapshot is not snapshot                # restored after emulation
