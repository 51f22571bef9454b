"""copy.deepcopy of neuron tensors and modules: an independent copy with equal values, as on CPU."""
import copy

import torch
from torch import nn


def test_deepcopy_of_a_tensor_keeps_values_grad_and_attributes_and_is_independent():
    t = torch.randn(3, device="neuron", requires_grad=True)
    t.grad = torch.ones(3, device="neuron")
    t.tag = "kept"
    u = copy.deepcopy(t)
    assert u.device == t.device and u.requires_grad and u.tag == "kept"
    assert torch.equal(u.detach().cpu(), t.detach().cpu()) and torch.equal(u.grad.cpu(), t.grad.cpu())
    with torch.no_grad():
        u.zero_()
    assert t.detach().abs().sum().item() > 0 and u.data_ptr() != t.data_ptr()


def test_deepcopy_of_a_module_with_buffers_matches_cpu():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    dev = copy.deepcopy(cpu).to("neuron")
    clone = copy.deepcopy(dev)
    x = torch.randn(8, 4)
    assert next(clone.parameters()).device.type == "neuron" and clone[1].running_mean.device.type == "neuron"
    torch.testing.assert_close(clone(x.to("neuron")).cpu(), cpu(x))


def test_deepcopy_of_a_timing_only_tensor_keeps_its_shape():
    with torch.neuron.timing_only():
        z = torch.empty(2, 3, device="neuron")
        assert copy.deepcopy(z).shape == (2, 3)
