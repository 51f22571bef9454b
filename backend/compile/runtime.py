"""Running a compiled graph: numerics on the host, kernels to the simulator sessions.

AOTAutograd hands the backend graphs over the host tensors inside the device tensors, so the
graph module runs on CPU tensors as is: that is the numerics. While a recording is active,
each call then feeds the graph's kernels to every sink, in execution order. With static shapes
the kernels are described once from the tracer's values; with symbolic shapes
(``dynamic=True`` or automatic dynamic after a recompile) the first call per input-shape
signature runs under an interpreter that keeps every node's real value to describe them.

In timing-only mode a graph may get host tensors with values (small ones, kept by the mode)
next to data-free ``meta`` ones. Host kernels do not all reject that mix (a CPU ``mm`` reads a
meta operand's missing data), so then every input runs as its data-free twin, as eager ops do.
"""
from __future__ import annotations


import torch
from torch import fx

from backend import recording
from backend.recording import SIMULATED_DEVICE_TYPES

from .device_values import device_outputs, rewrap_device_outputs
from .feed import feed_graph, first_call_done
from .kernels import ValueCapture, build_kernels, has_symbolic_shapes
from .graph_log import CompiledPartInfo

__all__ = ["CompiledPart", "place_on_host", "drop_data_free_twins", "bypass_nodes"]


_HOST = torch.device("cpu")
_META = torch.device("meta")
_COPY = torch.ops.aten._to_copy.default


def _host_device(value):
    if isinstance(value, torch.device) and value.type in SIMULATED_DEVICE_TYPES:
        return _HOST
    return value


def _mixes_data_free(args) -> bool:
    """Whether ``args`` hold both data-free (``meta``) tensors and tensors with values."""
    kinds = {a.is_meta for a in args if isinstance(a, torch.Tensor)}
    return len(kinds) == 2


def place_on_host(gm: fx.GraphModule) -> int:
    """Point factory ops at the host and drop the host copies that followed them.

    A factory traced with ``device="neuron"`` (``torch.arange(n, device=x.device)``) made a
    tracer tensor on the device, which the device layer copied to the host side; at run time
    the graph runs on host tensors, so the factory builds on the host and the copy goes. In
    timing-only mode the host side is ``meta`` (no values): the factory builds there instead.
    Returns the number of nodes changed.
    """
    changed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        device = node.kwargs.get("device")
        if device is not None and _host_device(device) is not device:
            node.kwargs = {**node.kwargs, "device": _HOST}
            changed += 1
            for user in list(node.users):
                if user.target is _COPY and _is_plain_host_copy(user, node):
                    node.kwargs = {**node.kwargs, "device": _copy_device(user)}
                    user.replace_all_uses_with(node)
                    gm.graph.erase_node(user)
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed


def drop_data_free_twins(gm: fx.GraphModule) -> int:
    """Drop the copies to ``meta`` that tracing a mix of timing-only inputs left in the graph.

    The device runs an op whose tensors mix values and data-free ones on data-free twins of all
    of them (``x.to("meta")``); traced, each twin is a ``_to_copy`` node that would be timed as a
    kernel the program does not run. At run time a graph given such a mix runs every input as
    its twin (``CompiledPart.__call__``), so the copies are not needed. Returns how many went.
    """
    twins = []
    for node in gm.graph.find_nodes(op="call_function", target=_COPY):
        source = node.args[0] if node.args else None
        src_val = source.meta.get("val") if isinstance(source, fx.Node) else None
        if (isinstance(src_val, torch.Tensor) and not src_val.is_meta and _copy_device(node).type == "meta"
                and _is_plain_host_copy(node, source)):
            twins.append((node, source))
    return bypass_nodes(gm, twins)


def bypass_nodes(gm: fx.GraphModule, replacements: list) -> int:
    """Replace each ``(node, by)`` pair's node by ``by`` and erase it; returns how many went.
    ``by`` may itself be a node replaced earlier in the list (a chain): its replacement is used."""
    replaced = {}
    for node, by in replacements:
        while by in replaced:
            by = replaced[by]
        node.replace_all_uses_with(by)
        gm.graph.erase_node(node)
        replaced[node] = by
    if replacements:
        gm.graph.lint()
        gm.recompile()
    return len(replacements)


def _copy_device(copy: fx.Node) -> torch.device:
    return torch.device(copy.kwargs.get("device", _HOST))


def _is_plain_host_copy(copy: fx.Node, src: fx.Node) -> bool:
    kwargs = dict(copy.kwargs)
    kwargs.pop("device", None)
    src_val, out_val = src.meta.get("val"), copy.meta.get("val")
    same_dtype = (isinstance(src_val, torch.Tensor) and isinstance(out_val, torch.Tensor)
                  and src_val.dtype == out_val.dtype)
    return (_copy_device(copy).type in ("cpu", "meta") and same_dtype and len(copy.args) == 1
            and set(kwargs) <= {"dtype", "layout", "pin_memory"}
            and kwargs.get("layout", torch.strided) == torch.strided)


class CompiledPart:
    """The callable AOTAutograd gets back for one graph (boxed calling convention)."""

    def __init__(self, info: CompiledPartInfo):
        # an instance attribute: AOTAutograd's wrappers copy __dict__, not class attributes
        self._boxed_call = True
        self.info = info
        self.gm = info.graph_module
        self.symbolic = has_symbolic_shapes(self.gm.graph)
        self._static = None if self.symbolic else build_kernels(self.gm, info.groups, sources=info.sources)
        self._by_shape: dict = {}
        # Relayouts and hoisted kernels touch parameters only, whose sizes stay static: one run
        # of the graph, at any input shape, does them for every shape described later.
        self._ran = False
        # A forward graph's outputs include the values saved for backward, which must stay
        # host tensors; its user outputs are device tensors already (adopt_device_values).
        self._device_outputs = device_outputs(self.gm) if info.part != "forward" else {}
        if self._static is not None:
            info.kernels = self._static

    def __call__(self, args: list):
        if _mixes_data_free(args):
            args[:] = [a.to(_META) if isinstance(a, torch.Tensor) else a for a in args]
        out = self._run(args)
        return rewrap_device_outputs(out, self._device_outputs) if self._device_outputs else out

    def _run(self, args: list):
        sinks = recording.active_sinks()
        if not sinks:
            out = self.gm(*args)
            args.clear()
            first_call_done(self._static or ())
            self._ran = True
            return out
        kernels = self._static
        if kernels is None:
            key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
            kernels = self._by_shape.get(key)
            if kernels is None:
                capture = ValueCapture(self.gm)
                out = capture.run(*args)
                kernels = self._by_shape[key] = build_kernels(self.gm, self.info.groups, capture.values,
                                                              self.info.sources)
                if self._ran:
                    first_call_done(kernels)
                self.info.kernels = kernels    # the registry shows the latest shapes
            else:
                out = self.gm(*args)
        else:
            out = self.gm(*args)
        args.clear()
        with recording.suspended():   # a sink must not see its own bookkeeping as device ops
            for sink, _with_source in sinks:
                feed_graph(sink, kernels)
        first_call_done(kernels)
        self._ran = True
        return out
