"""Bad input gets PyTorch-style errors and leaves the session usable."""
import gc

import pytest
import torch


def test_device_mix_raises_like_cuda(neuron):
    a = torch.randn(3, 3, device="neuron")
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least two devices, neuron:0 and cpu!"):
        a + torch.randn(3, 3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.randn(3, 3), a)
    # 0-dim CPU tensors are scalars, allowed as on CUDA.
    torch.testing.assert_close((a * torch.tensor(2.0)).cpu(), a.cpu() * 2)
    # CPU index tensors are allowed, as on CUDA.
    assert torch.equal(a[torch.tensor([0, 2])].cpu(), a.cpu()[[0, 2]])


def test_out_of_memory_then_recovery(neuron):
    torch.neuron.set_target("trn1")
    capacity = torch.neuron.get_device_properties().total_memory
    keep = torch.ones(1024, device="neuron")
    allocated = torch.neuron.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(capacity // 2 + 1, dtype=torch.int16, device="neuron").fill_(0)
        torch.empty(capacity // 4, dtype=torch.float32, device="neuron")
    message = str(info.value)
    assert "Tried to allocate" in message and "total capacity" in message and "already allocated" in message
    gc.collect()
    assert torch.neuron.memory_allocated() == allocated
    torch.testing.assert_close((keep + 1).cpu(), torch.full((1024,), 2.0))


def test_out_of_memory_from_an_op_output(neuron):
    torch.neuron.set_target("trn1")
    capacity = torch.neuron.get_device_properties().total_memory
    big = torch.empty(capacity // 8 * 5, dtype=torch.uint8, device="neuron")
    with pytest.raises(torch.OutOfMemoryError):
        big.clone()
    del big
    gc.collect()
    assert torch.ones(2, device="neuron").sum().item() == 2


def test_unknown_target_lists_known_ones(neuron):
    with pytest.raises(ValueError, match="trn1.*trn2.*trn3"):
        torch.neuron.set_target("trn9")
    assert torch.neuron.get_target().name == "trn2"


def test_round_trip_across_devices(neuron):
    x = torch.randn(5, 7, dtype=torch.float64)
    y = x.to("neuron").to(torch.float32).cpu().to("neuron").to(torch.float64).cpu()
    torch.testing.assert_close(y, x, rtol=1e-6, atol=1e-6)
    assert type(y) is torch.Tensor and y.device.type == "cpu"
