"""Reading a device tensor's value: as on CPU/CUDA with values, TimingOnlyError without."""
import contextlib

import numpy as np
import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend.device.cuda_emulation import disable, emulate_cuda
from backend.device.timing_only import STATE, TimingOnlyError, timing_only


@pytest.fixture(autouse=True)
def _fresh(neuron):
    STATE.reset()
    yield
    STATE.reset()
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


@pytest.fixture
def data_free():
    """A data-free 4x4 tensor and a data-free scalar, made in timing-only mode."""
    with timing_only():
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


def test_tensors_with_values_still_give_their_values(neuron):
    y = torch.arange(4.0, device="neuron")
    assert torch.allclose(y, y) and torch.equal(y, y) and y.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert np.array_equal(y.numpy(force=True), np.arange(4.0)) and f"{y.sum():.1f}" == "6.0"
