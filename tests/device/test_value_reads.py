"""Reading a device tensor's value as CPU and CUDA do (timing-only reads: test_timing_only.py)."""
import contextlib

import numpy as np
import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend.device.cuda_emulation import disable, emulate_cuda


@pytest.fixture(autouse=True)
def _emulation_off(neuron):
    yield
    disable()


def _on(device: str):
    """A context where ``device`` exists: the neuron device, or CUDA emulated on an H100."""
    return emulate_cuda("h100") if device == "cuda" else contextlib.nullcontext()


SPECS = [".4f", "", "e", ">12.3f"]


@pytest.mark.parametrize("device", ["neuron", "cuda"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_0_dim_tensor_formats_as_its_number(device, spec):
    """``f"{loss:.4f}"`` prints the number, as on CPU and CUDA (requires_grad too)."""
    cpu = (torch.tensor(1.23456, requires_grad=True) * 2)
    with _on(device):
        dev = (torch.tensor(1.23456, device=device, requires_grad=True) * 2)
        assert dev.device.type == device
        assert format(dev, spec) == format(cpu, spec)
        assert format(torch.tensor(7, device=device), "d") == "7"
        assert f"{torch.tensor(True, device=device)}" == "True"


@pytest.mark.parametrize("device", ["neuron", "cuda"])
def test_a_format_spec_on_a_non_scalar_raises_as_on_cpu(device):
    with pytest.raises(TypeError):
        format(torch.ones(2), ".4f")
    with _on(device):
        with pytest.raises(TypeError):
            format(torch.ones(2, device=device), ".4f")
        assert format(torch.ones(2, device=device), "") == str(torch.ones(2, device=device))


def test_tensors_with_values_still_give_their_values(neuron):
    y = torch.arange(4.0, device="neuron")
    assert torch.allclose(y, y) and torch.equal(y, y) and y.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert np.array_equal(y.numpy(force=True), np.arange(4.0)) and f"{y.sum():.1f}" == "6.0"
