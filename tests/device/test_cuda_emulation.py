"""CUDA emulation on a CPU-only build: unmodified CUDA code runs, matches CPU, and off is off."""
import gc
import os
import sys

import pytest
import torch

from backend import recording
from backend.device import memory
from backend.device.cuda_emulation import disable, emulate_cuda, enable, guard, is_enabled
from backend.device.tensor import DeviceTensor
from backend.sim.gpu import derive, get_gpu

sys.path.insert(0, os.path.dirname(__file__))
import cuda_script_example as script  # noqa: E402

DUMPED_OPS = ("aten::empty.memory_format", "aten::empty_strided", "aten::_copy_from", "aten::mm",
              "aten::addmm", "aten::_softmax", "aten::relu")


@pytest.fixture(autouse=True)
def _always_off():
    yield
    disable()   # a failing test must not leave emulation on for the next one


def _torch_state() -> dict:
    owners = {"torch.cuda": torch.cuda, "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
              "DeviceTensor": DeviceTensor, "autocast": torch.amp.autocast_mode.autocast,
              "torch.neuron": torch.neuron}
    state = {name: dict(vars(owner)) for name, owner in owners.items()}
    state["torch.compile"] = torch.compile
    state["dispatch tables"] = {op: torch._C._dispatch_dump_table(op) for op in DUMPED_OPS}
    state["AutocastPrivateUse1 fallback"] = torch._C._dispatch_has_backend_fallback(
        torch._C.DispatchKey.AutocastPrivateUse1)
    state["simulated types"] = set(recording.SIMULATED_DEVICE_TYPES)
    state["pools"] = dict(memory.POOLS)
    state["sinks"] = list(recording.STREAM.sinks)
    state["cuda guard slot"] = guard.slot_value()
    return state


def _assert_close_params(expected, actual):
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


# -- the unmodified script -----------------------------------------------------------------------
def test_cuda_script_matches_cpu_run():
    reference = script.main()
    assert reference["device"] == "cpu"
    with emulate_cuda("h100") as device:
        run = script.main()
        ops = [op.name for op in device.session.trace.ops]
    assert run["device"] == "cuda" and run["param_device"] == torch.device("cuda", 0)
    assert run["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    _assert_close_params(reference["params"], run["params"])
    assert "aten::addmm" in ops and any(name.startswith("aten::_foreach") or "lerp" in name for name in ops)
    assert run["elapsed_ms"] > 0
    assert 0 < run["memory_allocated"] <= run["max_memory_allocated"] < get_gpu("h100").hbm_bytes


def test_redirect_runs_the_script_on_neuron():
    from backend.lowering import lower
    from backend.sim.scheduler import Simulator

    class NeuronClock:
        """The NeuronCore simulator fed op by op (what an eager neuron session does)."""

        def __init__(self):
            self.sim = Simulator("trn2")

        def feed(self, record):
            self.sim.feed(lower(record, self.sim.target))

        @property
        def now_ns(self):
            return self.sim.now_ns

    reference = script.main()
    clock = NeuronClock()
    with emulate_cuda(redirect=True, session=clock):
        assert torch.cuda.is_available()
        run = script.main()
        assert torch.zeros(2, device="cuda").device == torch.device("neuron", 0)
        assert torch.cuda.get_device_name() == torch.neuron.get_device_name()
    assert run["device"] == "cuda" and run["param_device"] == torch.device("neuron", 0)
    _assert_close_params(reference["params"], run["params"])
    assert run["elapsed_ms"] == pytest.approx(clock.sim.now_ns / 1e6, rel=0.5) and run["elapsed_ms"] > 0
    assert clock.sim.trace.device_kind == "neuron" and len(clock.sim.trace.ops) > 20


def test_redirect_defaults_to_the_neuron_eager_session():
    with emulate_cuda(redirect=True) as device:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")
        end.record()
    assert type(device.session).__name__ == "EagerSession" and start.elapsed_time(end) > 0


# -- torch.cuda surface ----------------------------------------------------------------------------
def test_cuda_module_answers_for_the_preset():
    assert not torch.cuda.is_available()
    with emulate_cuda("a100"):
        assert torch.cuda.is_available() and torch.cuda.is_initialized()
        assert torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        assert torch.cuda.get_device_name(0) == "NVIDIA A100-SXM4-80GB (emulated)"
        props = torch.cuda.get_device_properties("cuda:0")
        a100 = get_gpu("a100")
        assert (props.major, props.minor) == torch.cuda.get_device_capability() == (8, 0)
        assert props.total_memory == int(a100.hbm_bytes) and props.multi_processor_count == a100.sm_count
        torch.cuda.set_device(0)
        with torch.cuda.device(0):
            assert torch.zeros(1, device="cuda").device == torch.device("cuda", 0)
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.cuda.set_device(1)
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.ones(2).to("cuda:1")
        assert torch.cuda.mem_get_info() == (int(a100.hbm_bytes) - torch.cuda.memory_allocated(),
                                              int(a100.hbm_bytes))
    assert not torch.cuda.is_available()


def test_derived_preset_names_itself():
    with emulate_cuda(derive("h100", hbm_bytes_per_s=4e12)):
        assert torch.cuda.get_device_name().startswith("NVIDIA H100 80GB HBM3 [h100*]")


FACTORIES = [
    lambda d: torch.zeros(2, 3, device=d),
    lambda d: torch.ones(2, 3, device=d, dtype=torch.bfloat16),
    lambda d: torch.full((2, 3), 7.5, device=d),
    lambda d: torch.arange(0, 10, 3, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    lambda d: torch.empty_like(torch.ones(3), device=d).fill_(2),
    lambda d: torch.ones(3).new_zeros((2, 2), device=d),
    lambda d: torch.linspace(-1, 1, 5, device=d),
]


@pytest.mark.parametrize("make", FACTORIES)
def test_factories_report_cuda_and_equal_cpu(make):
    expected = make("cpu")
    with emulate_cuda():
        value = make("cuda")
        assert isinstance(value, DeviceTensor) and value.is_cuda
        assert value.device == torch.device("cuda", 0) and "device='cuda:0'" in repr(value)
        torch.testing.assert_close(value.cpu(), expected)


def test_moves_and_modules():
    x = torch.randn(4, 4, requires_grad=True)
    with emulate_cuda():
        y = x.cuda()
        assert y.device.type == "cuda" and y.to("cuda") is y and y.cuda() is y
        assert y.to(torch.device("cuda", 0), torch.float16).dtype == torch.float16
        (y * 2).sum().backward()          # gradient flows back across the host-to-device copy
        torch.testing.assert_close(x.grad, torch.full((4, 4), 2.0))
        model = torch.nn.Linear(4, 2)
        weight = model.weight
        assert model.cuda() is model and model.weight is weight   # parameters swapped in place
        assert model.weight.device == torch.device("cuda", 0)
        assert type(model.to("cpu").weight) is torch.nn.Parameter


def test_seeding_matches_cpu():
    torch.manual_seed(3)
    expected = torch.randn(5), torch.randint(0, 9, (4,))
    with emulate_cuda():
        torch.cuda.manual_seed_all(3)
        drawn = torch.randn(5, device="cuda"), torch.randint(0, 9, (4,), device="cuda")
        torch.testing.assert_close(drawn[0].cpu(), expected[0])
        assert torch.equal(drawn[1].cpu(), expected[1])


def test_mixing_cuda_and_cpu_raises_like_cuda():
    with emulate_cuda():
        a = torch.ones(3, device="cuda")
        with pytest.raises(RuntimeError, match="same device.*cuda:0 and cpu"):
            a + torch.ones(3)
        with pytest.raises(RuntimeError, match="same device.*cuda:0 and cpu"):
            torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3, device="cuda"))
        assert (a + torch.tensor(2.0)).device.type == "cuda"   # CPU scalars are allowed, as on CUDA


def test_common_cuda_idioms():
    """Library code that builds tensors on ``x.device`` or checks ``torch.cuda`` inside torch."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(2, 5, 8)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        expected, _ = mha(q, q, q, attn_mask=mask)
    with emulate_cuda():
        mha.cuda()
        out, _ = mha(q.cuda(), q.cuda(), q.cuda(),
                     attn_mask=torch.nn.Transformer.generate_square_subsequent_mask(5, device="cuda"))
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)
        optimizer = torch.optim.SGD(mha.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = mha(q.cuda(), q.cuda(), q.cuda())[0].float().pow(2).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(mha.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        assert scaler.get_scale() == 65536.0            # finite grads: the scale is kept
        torch.set_default_device("cuda")
        try:
            assert torch.zeros(2).device == torch.device("cuda", 0)
        finally:
            torch.set_default_device(None)


# -- events and memory -----------------------------------------------------------------------------
def test_events_read_the_simulated_clock():
    with emulate_cuda("h100") as device:
        a = torch.randn(512, 512, device="cuda")
        small, big = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        small.record()
        a[:8, :8] @ a[:8, :8]
        big.record()
        a @ a @ a
        end.record()
        torch.cuda.current_stream().synchronize()
        ops = device.session.trace.ops
        assert end.elapsed_time(end) == 0.0
        assert big.elapsed_time(end) > 2 * small.elapsed_time(big) > 0
        assert small.elapsed_time(end) == pytest.approx((ops[-1].end_ns - small._time_ns) / 1e6)
        with pytest.raises(RuntimeError, match="enable_timing"):
            torch.cuda.Event().elapsed_time(end)
        with pytest.raises(RuntimeError, match="recorded"):
            torch.cuda.Event(enable_timing=True).elapsed_time(end)


def test_memory_books_against_hbm_then_oom_and_recovery():
    tiny = derive("h100", hbm_bytes=64 * 2**20, name="h100-64MiB")
    with emulate_cuda(tiny):
        gc.collect()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        x = torch.empty(4 * 2**20, device="cuda")              # 16 MiB
        assert torch.cuda.memory_allocated() - base == 16 * 2**20
        assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
        with pytest.raises(torch.OutOfMemoryError, match="cuda out of memory.*GPU 0"):
            torch.empty(16 * 2**20, device="cuda")              # 64 MiB more cannot fit
        with pytest.raises(torch.OutOfMemoryError):
            torch.ones(16 * 2**20).cuda()
        assert torch.cuda.max_memory_allocated() - base == 16 * 2**20
        del x
        gc.collect()
        assert torch.cuda.memory_allocated() == base
        y = torch.zeros(12 * 2**20, device="cuda")              # 48 MiB fits once x is gone
        assert torch.cuda.memory_stats()["num_ooms"] >= 2 and y.device.type == "cuda"


# -- autocast and compile -------------------------------------------------------------------------
def test_autocast_cuda_follows_cuda_policy():
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(4, 16, requires_grad=True)
    with emulate_cuda():
        xc, wc = x.cuda(), w.detach().cuda().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = torch.nn.functional.linear(xc, wc)
            probs = out.softmax(-1)
        assert out.dtype == torch.bfloat16 and probs.dtype == torch.float32
        probs.sum().backward()
        assert wc.grad.dtype == torch.float32
        expected = torch.nn.functional.linear(x.bfloat16(), w.detach().bfloat16())
        torch.testing.assert_close(out.cpu(), expected)
        assert torch.nn.functional.linear(xc, wc).dtype == torch.float32   # off outside the block


def test_compile_routes_the_default_backend_to_neuron():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    with torch.no_grad():   # a live autograd graph would pin the parameters Module.cuda() swaps
        expected = model(x)
    with emulate_cuda():
        model.cuda()
        compiled = torch.compile(model)
        out = compiled(x.cuda())
        assert out.device == torch.device("cuda", 0)
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
        out.sum().backward()
        assert model[0].weight.grad.device.type == "cuda"
    torch._dynamo.reset()


# -- on / off --------------------------------------------------------------------------------------
@pytest.mark.parametrize("redirect", [False, True])
def test_off_restores_torch_exactly(redirect):
    torch.neuron.get_target()        # the neuron device's own books exist before the snapshot
    before = _torch_state()
    clock = recording_sink = None
    if redirect:
        from backend.sim.gpu import GpuSession
        clock = recording_sink = GpuSession("h100")
    enable("h100", redirect=redirect, session=clock)
    assert is_enabled() and _torch_state() != before
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (torch.randn(4, 4, device="cuda") @ torch.randn(4, 4, device="cuda")).float().sum().item()
    torch.nn.Linear(2, 2).cuda()
    disable()
    after = _torch_state()
    assert not is_enabled() and all(sink is not recording_sink for sink, _ in recording.STREAM.sinks)
    for key in before:
        assert after[key] == before[key], f"{key} differs after disable()"
    assert guard.slot_value() is None and not torch.cuda.is_available()
    with pytest.raises((AssertionError, NotImplementedError, RuntimeError)):
        torch.zeros(1, device="cuda")


def test_enable_twice_is_refused_and_disable_is_idempotent():
    enable()
    with pytest.raises(RuntimeError, match="already on"):
        enable("a100")
    disable()
    disable()
    assert not is_enabled()


def test_a_bare_ordinal_names_the_emulated_gpu():
    # PyTorch maps a bare int to the current accelerator; under emulation that is the GPU.
    with emulate_cuda("h100"):
        assert torch.ones(2).to(0).device == torch.device("cuda", 0)
        assert torch.ones(2).to(0).is_cuda
        assert torch.nn.Linear(2, 1).to(0).weight.device == torch.device("cuda", 0)
        assert torch.nn.Linear(2, 1).to(device=0).weight.device == torch.device("cuda", 0)
        with pytest.raises(RuntimeError, match="CUDA error: invalid device ordinal 1"):
            torch.ones(2).to(1)
        with pytest.raises(RuntimeError, match="CUDA error: invalid device ordinal 1"):
            torch.nn.Linear(2, 1).to(1)
    assert torch.ones(2).to(1).device == torch.device("neuron", 1)    # emulation off: the accelerator


def test_the_gpu_of_a_later_local_rank_counts_its_memory(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    with emulate_cuda("h100"):
        before = torch.cuda.memory_allocated()
        x = torch.empty(1024, dtype=torch.float32, device="cuda:1")
        assert x.device == torch.device("cuda", 1) and torch.cuda.memory_allocated() == before + 4096


def test_an_emulated_cuda_tensor_and_a_neuron_tensor_do_not_mix():
    # Both live on one C++ device; a neuron tensor made while emulating reported cuda:0 and
    # mixed silently (the result on cuda:0).
    with emulate_cuda():
        a = torch.ones(3, device="cuda")
        made = {"factory": torch.ones(3, device="neuron"), "torch.device": torch.zeros(3, device=torch.device("neuron")),
                "cpu.to": torch.ones(3).to("neuron"), "cuda.to": a.to("neuron")}
        for how, n in made.items():
            assert n.device == torch.device("neuron", 0), how
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at "
                                                   "least two devices, cuda:0 and neuron:0"):
                a + n
            with pytest.raises(RuntimeError, match="same device.*neuron:0 and cuda:0"):
                torch.mm(n.reshape(3, 1), a.reshape(1, 3))
        assert a.to("cuda") is a and a.cuda() is a                  # a move to where it is: itself
        assert made["cuda.to"].to("cuda").device == torch.device("cuda", 0)
        torch.testing.assert_close((a + made["cuda.to"].cuda()).cpu(), torch.full((3,), 2.0))
