"""The one device-module API behind ``torch.neuron`` and emulated ``torch.cuda``: device
ordinals, shared implementation, resettable state, AMP hooks, streams and events."""
import pytest
import torch

from backend.device import events, memory, neuron_module, numerics
from backend.device.cuda_emulation import emulate_cuda, enable, is_enabled
from backend.device.cuda_emulation import emulation, guard
from backend.device.device_module import DeviceModule, device_index

# trn2 (the default target) shows 8 NeuronCores at LNC=1: neuron:8 is the first that does not exist.
NEURON_ORDINAL = r"neuron error: invalid device ordinal {} \(this machine has 8 NeuronCores: neuron:0, .*, neuron:7\)"
CUDA_ORDINAL = r"CUDA error: invalid device ordinal {} \(this machine has 1 GPU: cuda:0\)"


# -- device ordinals ------------------------------------------------------------------------------
@pytest.mark.parametrize("device", [8, "neuron:8", torch.device("neuron", 8)])
def test_neuron_module_rejects_cores_that_do_not_exist(neuron, device):
    for query in (torch.neuron.memory_allocated, torch.neuron.memory_stats, torch.neuron.get_device_properties,
                  torch.neuron.set_device, torch.neuron.synchronize, torch.neuron.device):
        with pytest.raises(RuntimeError, match=NEURON_ORDINAL.format(8)):
            query(device)


@pytest.mark.parametrize("device", [None, 0, "neuron", "neuron:0", torch.device("neuron", 0)])
def test_neuron_module_accepts_core_zero(neuron, device):
    assert torch.neuron.memory_allocated(device) == torch.neuron.memory_allocated()
    assert torch.neuron.get_device_properties(device).target == "trn2"


def test_another_device_type_is_a_value_error():
    with pytest.raises(ValueError, match="Expected a neuron device, but got: cpu"):
        torch.neuron.memory_allocated("cpu")


def test_the_count_is_a_parameter():
    assert device_index("neuron:2", "neuron", 4, "NeuronCore") == 2
    with pytest.raises(RuntimeError, match=r"has 2 NeuronCores: neuron:0, neuron:1\)"):
        device_index(2, "neuron", 2, "NeuronCore")


@pytest.mark.parametrize("make", [
    lambda: torch.empty(2, device="neuron:8"),
    lambda: torch.zeros(2, 3, device="neuron:8"),
    lambda: torch.arange(4, device="neuron:8"),
    lambda: torch.tensor([1.0], device="neuron:8"),
    lambda: torch.ones(2).to("neuron:8"),
    lambda: torch.ones(2, device="neuron").to("neuron:8"),
])
def test_tensors_cannot_be_made_on_a_missing_core(neuron, make):
    with pytest.raises(RuntimeError, match=NEURON_ORDINAL.format(8)):
        make()


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(2, device="cuda:1"),
    lambda: torch.tensor([1.0], device="cuda:1"),
    lambda: torch.ones(2).to("cuda:1"),
    lambda: torch.ones(2).cuda(1),
    lambda: torch.cuda.memory_allocated("cuda:1"),
])
def test_emulated_cuda_rejects_missing_gpus(make):
    with emulate_cuda("h100"):
        with pytest.raises(RuntimeError, match=CUDA_ORDINAL.format(1)):
            make()


def test_mixing_neuron_and_emulated_cuda_tensors_raises(neuron):
    on_neuron = torch.ones(3, device="neuron")
    with emulate_cuda("h100"):
        on_cuda = torch.ones(3, device="cuda")
        assert on_neuron.device == torch.device("neuron", 0) and not on_neuron.is_cuda
        assert (on_neuron * 2).device == torch.device("neuron", 0)
        with pytest.raises(RuntimeError, match="same device.*neuron:0 and cuda:0"):
            on_neuron + on_cuda
        with pytest.raises(RuntimeError, match="same device.*cuda:0 and neuron:0"):
            torch.mm(on_cuda.view(1, 3), on_neuron.view(3, 1))
        moved = on_neuron.cuda()
        assert moved is not on_neuron and moved.device == torch.device("cuda", 0)
        assert torch.equal((moved + on_cuda).cpu(), torch.full((3,), 2.0))
    assert on_cuda.device == torch.device("neuron", 0)   # made while on: valid on neuron:0 after


# -- one implementation ---------------------------------------------------------------------------
def test_torch_neuron_and_emulated_cuda_share_one_implementation():
    assert torch.neuron.memory_allocated.__self__ is neuron_module.MODULE
    with emulate_cuda("h100"):
        for name in ("memory_allocated", "get_device_properties", "set_device", "get_amp_supported_dtype"):
            cuda, neuron = getattr(torch.cuda, name), getattr(torch.neuron, name)
            assert isinstance(cuda.__self__, DeviceModule) and cuda.__func__ is neuron.__func__
        assert issubclass(torch.cuda.Event, events.Event) and issubclass(torch.neuron.Event, events.Event)


# -- resettable state -------------------------------------------------------------------------------
def test_state_objects_reset(neuron):
    numerics.set_hardware_numerics(True)
    numerics.SWITCH.reset()
    assert not torch.neuron.hardware_numerics_enabled()

    torch.neuron.set_target("trn1")
    neuron_module.SELECTION.reset()
    assert torch.neuron.get_target().name == "trn2"

    pools = memory.MemoryPools()
    pool = pools.install("neuron", 1024, "test")
    assert pools.install("neuron", 2048, "bigger") is pool and pool.capacity_bytes == 2048
    pools.reset()
    assert pools.get("neuron") is None
    assert memory.memory_for("neuron") is memory.POOLS["neuron"]

    enable("h100")
    emulation.PATCHES.reset()
    assert not is_enabled() and not torch.cuda.is_available() and guard.slot_value() is None


# -- AMP ------------------------------------------------------------------------------------------
def test_checkpoint_works_for_cpu_tensors_with_the_device_registered():
    # torch.utils.checkpoint asks every registered device module for its AMP dtypes.
    x = torch.randn(4, 3, requires_grad=True)
    torch.utils.checkpoint.checkpoint(lambda t: t.sin() * 2, x, use_reentrant=False).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    assert torch.neuron.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


def test_autocast_neuron_runs_matmuls_in_bf16_like_cpu_autocast(neuron):
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.mm(a, b)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = torch.mm(a.to("neuron"), b.to("neuron"))
        probs = out.float().softmax(-1)
    assert out.dtype == expected.dtype == torch.bfloat16 and probs.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), expected)
    assert torch.mm(a.to("neuron"), b.to("neuron")).dtype == torch.float32   # off outside the block


# -- streams and events -----------------------------------------------------------------------------
class _Clock:
    """A recording sink whose simulated clock advances 1 us per op."""

    def __init__(self):
        self.now_ns = 0.0

    def feed(self, record):
        self.now_ns += 1000.0


def test_neuron_events_read_the_recording_simulator_clock(neuron):
    from backend import recording

    x = torch.ones(4, device="neuron")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with recording.recording(_Clock()):
        start.record()
        x + x
        x * x
        end.record()
    assert start.elapsed_time(end) == pytest.approx(0.002)
    stream = torch.neuron.current_stream()
    assert stream == torch.neuron.Stream() and stream.device == torch.device("neuron", 0)
    assert stream.query() and "torch.neuron.Stream" in repr(stream)
    with torch.neuron.stream(stream):
        pass


def test_an_event_without_timing_records_outside_a_profile():
    # FSDP2 records such events around its all-gathers, profiled or not.
    event = torch.neuron.Event()
    event.record()
    event.synchronize()
    assert event.query()
