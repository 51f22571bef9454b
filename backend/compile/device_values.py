"""Values a compiled frame creates on the simulated device become device tensors while tracing.

A device tensor is a traceable wrapper subclass, so AOTAutograd sees through the ones that
reach it (inputs, parameters) and through every op on them. A factory (``torch.full(...,
device=x.device)``, ``torch.arange``, ``x.cpu().to(x.device)``) has no device tensor among its
operands, so under the tracer it makes a plain tracer tensor that merely claims the device.
Left so, an in-place op on it (``full(...).add_(x)``, ``zeros(...).index_copy_``, a static KV
cache's slice assignment) reaches the device's dispatch, which can only compute on a host copy
of it: the write lands on the copy, and Dynamo's graph, which returns the buffer itself,
returns the unwritten one. And a plain tensor leaving the graph is not re-wrapped, so the
result comes back on the CPU.

``adopt_device_values`` therefore wraps each such value, where Dynamo's graph creates it, in
the device's own tensor type around its host-side value: from then on every op on it, in-place
or not, traces through the device like an op on an input, and an output that is (or aliases)
it comes back as a device tensor. The host-side copy the wrap traces is folded into the
factory by ``runtime.place_on_host``.
"""
from __future__ import annotations

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves, tree_map

from backend.recording import SIMULATED_DEVICE_TYPES

__all__ = ["adopt_device_values", "as_device_tensor", "device_outputs", "rewrap_device_outputs"]


def _plain_on_device(value) -> bool:
    """A tensor on a simulated device that is not the device's wrapper (a tracer's own)."""
    return (isinstance(value, torch.Tensor) and not is_traceable_wrapper_subclass(value)
            and value.device.type in SIMULATED_DEVICE_TYPES)


def _makes_plain_device_value(node: fx.Node) -> bool:
    return any(_plain_on_device(v) for v in tree_leaves(node.meta.get("example_value")))


def _device_input(gm: fx.GraphModule, device_type: str) -> fx.Node | None:
    """A graph input that is a device tensor of ``device_type``: a template for the wrap."""
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value")
        if is_traceable_wrapper_subclass(value) and value.device.type == device_type:
            return node
    return None


def adopt_device_values(gm: fx.GraphModule) -> int:
    """Wrap every value Dynamo's graph ``gm`` creates on a simulated device from no device
    operand (factories, host-to-device copies) in the device's tensor type, right where it is
    made; their users, the graph outputs included, take the wrapped value. Values computed
    from those are device tensors by then and need nothing. Returns the number wrapped."""
    graph = gm.graph
    made = [n for n in graph.nodes if n.op != "placeholder" and _makes_plain_device_value(n)]
    roots = [n for n in made if not any(_makes_plain_device_value(i) for i in n.all_input_nodes)]
    for node in roots:
        device_type = next(v.device.type for v in tree_leaves(node.meta["example_value"]) if _plain_on_device(v))
        with graph.inserting_after(node):
            wrapped = graph.call_function(as_device_tensor, (node, _device_input(gm, device_type)))
        wrapped.meta.update(node.meta)
        node.replace_all_uses_with(wrapped, delete_user_cb=lambda user, w=wrapped: user is not w)
    if roots:
        graph.lint()
        gm.recompile()
    return len(roots)


def as_device_tensor(value, template: torch.Tensor | None = None):
    """``value``'s plain device tensors as device tensors of the type of ``template`` (a device
    tensor of the same device type), holding their values on its host side. Without a
    template, an empty device tensor made outside the tracer stands in (the device decides its
    host side: the CPU, or ``meta`` in timing-only mode). Anything else is returned as is."""
    return tree_map(lambda t: _adopt(t, template) if _plain_on_device(t) else t, value)


def _empty_device_tensor(device: torch.device) -> torch.Tensor:
    """A device tensor made outside any tracer: the device's tensor type, and its host side."""
    with _disable_current_modes():
        return torch.empty(0, device=device)


def _host_name(template: torch.Tensor) -> str:
    names, _device = template.__tensor_flatten__()
    if len(names) != 1:
        raise RuntimeError(f"torch.compile(backend='neuron'): {type(template).__name__} flattens to "
                           f"{len(names)} tensors; a device tensor wraps exactly one host tensor")
    return names[0]


def _wrap(wrapper_type: type, name: str, host: torch.Tensor, device: torch.device) -> torch.Tensor:
    return wrapper_type.__tensor_unflatten__({name: host}, device, host.size(), host.stride())


def _adopt(tensor: torch.Tensor, template: torch.Tensor | None) -> torch.Tensor:
    if template is None:
        template = _empty_device_tensor(tensor.device)
    name = _host_name(template)
    host_device = getattr(template, name).device
    return _Adopt.apply(tensor, type(template), name, host_device)


class _Adopt(torch.autograd.Function):
    """The wrap, differentiable: a gradient flows back to the plain value unchanged (it is on
    the same device)."""

    @staticmethod
    def forward(ctx, tensor, wrapper_type, name, host_device):
        return _wrap(wrapper_type, name, tensor.to(host_device), tensor.device)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None


# -- outputs AOTAutograd traced as plain device tensors -----------------------------------------
def device_outputs(gm: fx.GraphModule) -> dict:
    """Output position -> how to wrap it (device, the device's tensor type, its host field),
    for the outputs of an AOTAutograd graph traced as plain tensors on a simulated device:
    AOTAutograd hands their host values back unwrapped. What remains after
    ``adopt_device_values`` comes from autograd's own formulas (the gradient of ``x.cpu()``
    is ``grad.to(x.device)``), traced where no Dynamo graph is. Worked out at compile time."""
    output = next(iter(gm.graph.find_nodes(op="output")))
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    positions = {}
    for i, node in enumerate(values):
        if isinstance(node, fx.Node) and _plain_on_device(node.meta.get("val")):
            device = node.meta["val"].device
            template = _empty_device_tensor(device)
            positions[i] = (device, type(template), _host_name(template))
    return positions


def rewrap_device_outputs(outputs, positions: dict) -> list:
    """``outputs`` with the host tensors at ``positions`` wrapped onto their devices."""
    outputs = list(outputs)
    for i, (device, wrapper_type, name) in positions.items():
        host = outputs[i]
        if isinstance(host, torch.Tensor) and not is_traceable_wrapper_subclass(host):
            outputs[i] = _wrap(wrapper_type, name, host, device)
    return outputs
