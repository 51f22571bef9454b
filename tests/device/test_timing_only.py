"""Timing-only mode: data-free device tensors time exactly like tensors with values."""
import dataclasses
import gc

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb
from backend import recording
from backend.device.cuda_emulation import disable, emulate_cuda
from backend.device.tensor import DeviceTensor
from backend.device.timing_only import DEFAULT_VALUES_UP_TO, STATE, TimingOnlyError
from backend.sim.presets import derive

GiB = 1 << 30


@pytest.fixture(autouse=True)
def _fresh(neuron):
    STATE.reset()
    # These tests check data-free tensors themselves, on small ones too: no tensor keeps values
    # for being small (that rule: test_timing_only_values.py).
    STATE.values_up_to = 0
    yield
    STATE.reset()
    disable()
    gc.collect()


class RecordSink:
    """Every OpRecord the device emits, without its running index and source line."""

    def __init__(self):
        self.records = []

    def feed(self, record):
        self.records.append(dataclasses.replace(record, index=0, source=None))

    def feed_kernel(self, name, records, internal_bytes_saved=0, nodes=(), source=None):
        self.records.append((name, tuple(dataclasses.replace(r, index=0, source=None) for r in records)))


# -- models ------------------------------------------------------------------------------------
class GPT2Block(nn.Module):
    """One GPT-2-small block (d_model 768, 12 heads), as nanoGPT writes it."""

    def __init__(self, d=768, heads=12):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def gpt2_block():
    return GPT2Block(), (2, 32, 768)


def bert_layer():
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, batch_first=True, activation="gelu")
    return layer, (2, 24, 256)


def small_cnn():
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(32, 10))
    return net, (4, 3, 16, 16)


def _step(build, timing_only, compile_=False, values_up_to=0):
    """Build the model and its input on neuron, run forward + backward under a profile
    (``values_up_to``: the elements a tensor may have and keep values in the mode)."""
    torch.manual_seed(0)
    with torch.device("neuron"), torch.neuron.timing_only(timing_only, values_up_to=values_up_to):
        model, shape = build()
        x = torch.randn(shape)
    run = torch.compile(model, backend="neuron") if compile_ else model
    sink = RecordSink()
    with wb.profile() as prof, recording.recording(sink):
        run(x).float().pow(2).mean().backward()
    return prof, sink.records


@pytest.mark.parametrize("values_up_to", [0, DEFAULT_VALUES_UP_TO])
@pytest.mark.parametrize("build", [gpt2_block, bert_layer, small_cnn])
def test_identical_traces_with_and_without_values(build, values_up_to):
    with_values, records = _step(build, timing_only=False)
    data_free, data_free_records = _step(build, timing_only=True, values_up_to=values_up_to)
    assert records and data_free_records == records
    assert [(op.name, op.start_ns, op.end_ns) for op in data_free.trace.ops] == \
        [(op.name, op.start_ns, op.end_ns) for op in with_values.trace.ops]
    assert data_free.summary["total_time"] == with_values.summary["total_time"]


@pytest.mark.parametrize("values_up_to", [0, DEFAULT_VALUES_UP_TO])
def test_compiled_block_times_identically(values_up_to):
    """Also when small parameters keep values next to data-free ones: the graph then runs on
    data-free twins of all its inputs, and the twins are not timed as copies."""
    torch._dynamo.reset()
    with_values, _ = _step(bert_layer, timing_only=False, compile_=True)
    data_free, _ = _step(bert_layer, timing_only=True, compile_=True, values_up_to=values_up_to)
    names = [op.name for op in with_values.trace.ops]
    assert any(name.startswith("k") for name in names)        # fused kernels ran
    assert [op.name for op in data_free.trace.ops] == names
    assert data_free.summary["total_time"] == with_values.summary["total_time"]


def test_profile_hook_makes_block_tensors_data_free():
    with wb.profile(timing_only=True) as prof:
        assert torch.neuron.is_timing_only()
        y = torch.randn(64, 64, device="neuron") @ torch.randn(64, 64, device="neuron")
    assert not torch.neuron.is_timing_only()
    assert y._inner.is_meta and prof.meta["timing_only"]
    assert any(op.name == "aten::mm" for op in prof.trace.ops)


# -- where tensors are born ----------------------------------------------------------------------
def test_switch_and_context_manager():
    assert not torch.neuron.is_timing_only()
    with torch.neuron.timing_only():
        assert torch.neuron.is_timing_only()
        with torch.neuron.timing_only(False):
            assert torch.empty(2, device="neuron")._inner.device.type == "cpu"
        assert torch.empty(2, device="neuron")._inner.is_meta
    torch.neuron.set_timing_only(True)
    assert torch.neuron.is_timing_only()
    STATE.reset()
    assert not torch.neuron.is_timing_only()


def test_module_moved_to_device_is_data_free_and_counted():
    before = torch.neuron.memory_allocated()
    with torch.neuron.timing_only():
        model = nn.Linear(256, 512).to("neuron")
    assert all(isinstance(p, DeviceTensor) and p._inner.is_meta for p in model.parameters())
    assert torch.neuron.memory_allocated() - before >= (256 * 512 + 512) * 4


def test_results_of_data_free_tensors_stay_data_free_and_views_alias():
    with torch.neuron.timing_only():
        w = torch.randn(8, 4, device="neuron")
    x = torch.randn(3, 8, device="neuron")           # made with values, outside the mode
    y = x @ w
    assert y._inner.is_meta and y.shape == (3, 4)
    view = w.t()[1:]
    assert view.stride() == (1, 4) and view.storage_offset() == 1
    assert view._inner.untyped_storage()._cdata == w._inner.untyped_storage()._cdata


def test_too_large_model_raises_the_device_out_of_memory_error():
    # 8.05e9 bf16 parameters (16.1 GB) on one trn2 NeuronCore (12 GiB of HBM).
    with torch.device("neuron"), torch.neuron.timing_only():
        with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 128\.00 MiB.*12\.00 GiB"):
            nn.Sequential(*[nn.Linear(8192, 8192, bias=False, dtype=torch.bfloat16) for _ in range(120)])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_host_memory_stays_flat_for_a_model_larger_than_the_host():
    torch.neuron.set_target(derive("trn2", hbm_bytes=64 * GiB))
    gc.collect()
    before_rss, before_hbm = _rss_bytes(), torch.neuron.memory_allocated()
    with torch.device("neuron"), torch.neuron.timing_only():
        model = nn.Sequential(*[nn.Linear(16384, 16384, bias=False) for _ in range(40)])   # 43 GB fp32
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert nbytes > 40e9
    assert torch.neuron.memory_allocated() - before_hbm == nbytes
    assert _rss_bytes() - before_rss < 200 * 2**20
    del model
    gc.collect()
    assert torch.neuron.memory_allocated() == before_hbm


def test_emulated_cuda_is_data_free_too():
    with emulate_cuda("h100"), torch.cuda.timing_only():
        y = nn.Linear(32, 16).cuda()(torch.randn(4, 32, device="cuda"))
        assert y.device.type == "cuda" and y._inner.is_meta
        with pytest.raises(TimingOnlyError):
            y.sum().item()


# -- what needs values fails clearly -------------------------------------------------------------
def _data_free(*shape):
    with torch.neuron.timing_only():
        return torch.randn(*shape, device="neuron")


@pytest.mark.parametrize("needs_values", [
    lambda t: t.sum().item(), lambda t: float(t[0, 0]), lambda t: bool(t.sum() > 0), lambda t: print(t),
    lambda t: f"{t}", lambda t: t.cpu(), lambda t: t.to("cpu"), lambda t: t.numpy(force=True),
    lambda t: t.tolist(), lambda t: torch.empty(4, 4).copy_(t), lambda t: t.nonzero(), lambda t: t[t > 0],
    lambda t: t.unique(), lambda t: t.masked_select(t > 0), lambda t: torch.equal(t, t),
    lambda t: torch.save(t, "/dev/null"),
], ids=["item", "float", "bool", "print", "format", "cpu", "to_cpu", "numpy", "tolist", "copy_to_host",
        "nonzero", "bool_mask", "unique", "masked_select", "equal", "save"])
def test_what_needs_values_fails_naming_the_mode(needs_values):
    with pytest.raises(TimingOnlyError, match="timing-only mode.*set_timing_only\\(False\\)"):
        needs_values(_data_free(4, 4))


def test_repr_says_there_are_no_values():
    assert repr(_data_free(2, 3)) == \
        "tensor(<no values: timing-only>, size=(2, 3), device='neuron:0', dtype=torch.float32)"


def test_writing_a_data_free_result_into_a_tensor_with_values_drops_its_values():
    x = torch.zeros(4, 4, device="neuron")
    view = x[1:]
    assert x.add_(_data_free(4, 4)) is x
    for lost in (x, view, view * 2, x.sum()):
        with pytest.raises(TimingOnlyError, match="lost them to aten::add_ writing a timing-only result"):
            lost.tolist()
    assert "no values: written by aten::add_" in repr(x)
    x.fill_(3.0)                                     # a clean overwrite gives it values again
    assert x.sum().item() == 48.0


def test_a_shape_error_stays_a_shape_error():
    with pytest.raises(RuntimeError, match=r"3.*4.*5.*6") as info:
        _data_free(3, 4) @ _data_free(5, 6)
    assert not isinstance(info.value, TimingOnlyError)


@pytest.mark.parametrize("build", [gpt2_block, bert_layer, small_cnn])
def test_compare_times_identically_with_and_without_values(build):
    """The same models through ``wb.compare(timing_only=...)``: the NeuronCore and the emulated
    GPU simulate the same time, op for op, and the mode is left afterwards."""
    def step():                           # built on the device compare makes the default
        model, shape = build()
        loss = model(torch.randn(shape)).float().pow(2).mean()
        loss.backward()
        return loss

    runs = {mode: wb.compare(step, devices=("neuron", "cuda"), timing_only=mode) for mode in (False, True)}
    assert not torch.neuron.is_timing_only()
    assert list(runs[True].frame["time_s"]) == list(runs[False].frame["time_s"])
    for label, prof in runs[True].profiles.items():
        assert prof.meta["timing_only"] and prof.summary["values"].startswith("none")
        assert runs[True].results[label]._inner.is_meta and not runs[False].results[label]._inner.is_meta
        assert [(op.name, op.end_ns) for op in prof.trace.ops] == \
            [(op.name, op.end_ns) for op in runs[False].profiles[label].trace.ops]


@pytest.fixture
def data_free():
    """A data-free 4x4 tensor and a data-free scalar, made in timing-only mode."""
    with torch.neuron.timing_only():
        return torch.ones(4, 4, device="neuron"), torch.ones((), device="neuron")


VALUE_READS = {
    "allclose": lambda y, s: torch.allclose(y, y),
    "equal": lambda y, s: torch.equal(y, y),
    "item": lambda y, s: s.item(),
    "float": lambda y, s: float(s),
    "int": lambda y, s: int(s),
    "bool": lambda y, s: bool(s),
    "if": lambda y, s: 1 if (y > 0).all() else 0,
    "tolist": lambda y, s: y.tolist(),
    "numpy": lambda y, s: y.numpy(force=True),
    "cpu": lambda y, s: y.cpu(),
    "data_ptr": lambda y, s: y.data_ptr(),
    "nonzero": lambda y, s: y.nonzero(),
    "masked_select": lambda y, s: y[y > 0],
    "unique": lambda y, s: torch.unique(y),
    "format": lambda y, s: f"{s:.4f}",
    "str": lambda y, s: str(y),
    "assert_close": lambda y, s: torch.testing.assert_close(y, y),
}


@pytest.mark.parametrize("read", VALUE_READS.values(), ids=VALUE_READS.keys())
def test_reading_a_timing_only_tensors_value_raises_timing_only_error(data_free, read):
    y, s = data_free
    with pytest.raises(TimingOnlyError, match="timing-only"):
        read(y, s)
    assert (y + 1).shape == (4, 4)          # the session stays usable
