"""``tensor.data = other`` with device tensors behaves as between CPU and CUDA tensors: the object
keeps its identity, attributes and ``requires_grad`` and takes the other tensor's values."""
import pytest
import torch


def test_a_device_parameter_takes_new_device_values(neuron):
    p = torch.nn.Parameter(torch.zeros(3, device=neuron))
    new = torch.arange(4., device=neuron)
    p.data = new
    assert p.shape == (4,) and torch.equal(p.cpu(), torch.arange(4.))     # once silently kept zeros
    new.add_(1)                                                          # shares the values, as set_data does
    assert torch.equal(p.detach().cpu(), torch.arange(1., 5.))
    assert p.requires_grad and isinstance(p, torch.nn.Parameter)


@pytest.mark.parametrize("source, target", [("cpu", "neuron"), ("neuron", "cpu")])
def test_data_moves_a_parameter_across_the_host_device_boundary(neuron, source, target):
    layer = torch.nn.Linear(3, 2).to(source)
    weight = layer.weight
    weight.tag = "kept"
    values = weight.detach().cpu().clone()
    weight.data = weight.to(target)      # what FSDP2 does to a CPU-built model
    assert layer.weight is weight and weight.tag == "kept"
    assert isinstance(weight, torch.nn.Parameter) and weight.requires_grad
    assert weight.device.type == target and torch.equal(weight.detach().cpu(), values)
    assert dict(layer.named_parameters())["weight"] is weight
    layer.bias.data = layer.bias.to(target)
    out = layer(torch.ones(1, 3, device=target))
    out.sum().backward()
    assert weight.grad.device.type == target


def test_a_buffer_moves_and_keeps_requires_grad_off(neuron):
    buffer = torch.ones(2)
    buffer.data = buffer.to(neuron)
    assert buffer.device.type == "neuron" and not buffer.requires_grad
    assert type(buffer) is not torch.nn.Parameter


def test_plain_tensors_are_untouched(neuron):
    t = torch.zeros(2)
    t.data = torch.ones(3)
    assert torch.equal(t, torch.ones(3)) and type(t) is torch.Tensor
    with pytest.raises(RuntimeError, match="set_data"):
        t.data = torch.ones(2, dtype=torch.int64).to_sparse()     # PyTorch's own refusal
