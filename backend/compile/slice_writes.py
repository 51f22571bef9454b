"""Functionalised slice writes, costed as compilers run them: in place, without whole-buffer copies.

A serving step writes its new tokens' keys and values into the KV cache it was handed
(``cache[:, :, i:j].copy_(k)``). AOTAutograd functionalises that into a ``slice_scatter`` that
builds a whole new cache with the slots replaced, and a ``copy_`` of that new cache back into the
input at the end of the graph: two copies of the whole cache, per layer, per token. Compilers do
not run that: neuronx-cc aliases the cache's input and output buffers (NxD Inference passes the
KV cache as an aliased input, XLA's ``input_output_alias``) and Inductor's reinplace pass turns the
scatter back into a write of the slot. Here the graph is rewritten the same way: the slots are
written into the input (``slice`` view + ``copy_``), the scatter's users read the input, and the
write-back goes. The result is the same values, and a timed write of the new slots only.

Only the safe case is rewritten: the scatter's base is a graph input whose write-back is that
scatter, and no other node reads the input (directly or through a view) after the scatter.
"""
from __future__ import annotations

import sys

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fusion import node_class, view_root
from .runtime import bypass_nodes

__all__ = ["drop_whole_scatters", "write_inputs_in_place"]

_aten = torch.ops.aten
_SCATTER = _aten.slice_scatter.default
_WRITE_BACK = _aten.copy_.default


def _scatter_args(node: fx.Node) -> tuple:
    args = dict(zip(("input", "src", "dim", "start", "end", "step"), node.args), **node.kwargs)
    return args["input"], args["src"], args.get("dim", 0), args.get("start"), args.get("end"), args.get("step", 1)


def _same_layout(a: torch.Tensor, b: torch.Tensor, strides: bool = True) -> bool:
    """Whether ``a`` and ``b`` have the same sizes (and strides and offset) for every size a
    symbolic graph may see."""
    pairs = list(zip(a.shape, b.shape))
    if strides:
        pairs += [*zip(a.stride(), b.stride()), (a.storage_offset(), b.storage_offset())]
    return a.dim() == b.dim() and all(statically_known_true(x == y) for x, y in pairs)


def drop_whole_scatters(gm: fx.GraphModule) -> int:
    """Replace each ``slice_scatter`` over a whole axis (``x[:] = y``) by its source.

    Functionalising a write through a full slice (``buf[:, :, i:j].copy_(v)``, the leading ``:``
    a full slice) leaves an outer ``slice_scatter`` of the whole tensor, a copy of it. With static
    shapes the tracer folds it away; with symbolic ones it stays, and would be timed as a kernel
    copying the whole buffer that the program does not run. Returns how many went.
    """
    whole = []
    for node in gm.graph.find_nodes(op="call_function", target=_SCATTER):
        base, src, dim, start, end, step = _scatter_args(node)
        base_val, src_val = (n.meta.get("val") if isinstance(n, fx.Node) else None for n in (base, src))
        if not (isinstance(base_val, torch.Tensor) and isinstance(src_val, torch.Tensor)):
            continue
        to_the_end = end is None or (isinstance(end, int) and (end >= sys.maxsize or statically_known_true(
            end >= base_val.shape[dim])))
        if (start in (None, 0) and step in (None, 1) and to_the_end and src_val.dtype == base_val.dtype
                and _same_layout(src_val, base_val, strides=False)):
            whole.append((node, src))
    return bypass_nodes(gm, whole)


def _whole_view(node: fx.Node, base: fx.Node) -> bool:
    """Whether ``node`` is ``base`` or a view of all of it (``base[:]``, which a symbolic trace keeps)."""
    if node is base:
        return True
    value, whole = node.meta.get("val"), base.meta.get("val")
    return (view_root(node) is base and isinstance(value, torch.Tensor) and isinstance(whole, torch.Tensor)
            and _same_layout(value, whole))


def _read_after(base: fx.Node, scatter: fx.Node, write_back: fx.Node) -> bool:
    """Whether a node other than the write-back reads ``base`` (directly or through a view) after
    the scatter."""
    node = scatter.next
    while node.op != "root":
        if node is not write_back and node_class(node) != "view" and any(
                view_root(i) is base for i in node.all_input_nodes):
            return True
        node = node.next
    return False


def _slots_value(base: fx.Node, src: fx.Node):
    """A fake tensor for the view of ``base`` the slots are written into: ``src``'s sizes with
    ``base``'s strides. Made from existing sizes, not by running ``slice`` in the fake mode:
    a slice at a symbolic offset would add a size symbol Dynamo cannot guard."""
    base_val, src_val = base.meta["val"], src.meta["val"]
    fake_mode = detect_fake_mode([base_val]) or torch._subclasses.FakeTensorMode()
    with fake_mode:
        return torch.empty_strided(src_val.shape, base_val.stride(), dtype=base_val.dtype, device=base_val.device)


def _scatter_chain(write_back: fx.Node) -> list:
    """The scatters whose result the write-back copies into its input, first to last: each one's
    base is the one before, the first one's the input itself (or all of it, ``input[:]``)."""
    base, node = write_back.args[0], write_back.args[1]
    chain = []
    while isinstance(node, fx.Node) and node.target is _SCATTER:
        chain.append(node)
        before = _scatter_args(node)[0]
        if _whole_view(before, base):
            return chain[::-1]
        node = view_root(before)
        if not _whole_view(before, node):
            break
    return []


def _write_in_place(scatter: fx.Node, base: fx.Node) -> None:
    """Write the scatter's slots into ``base`` and let the scatter's users read ``base``."""
    graph = scatter.graph
    _, src, dim, start, end, step = _scatter_args(scatter)
    with graph.inserting_before(scatter):
        slots = graph.call_function(_aten.slice.Tensor, (base, dim, start, end, step))
        write = graph.call_function(_WRITE_BACK, (slots, src))
    slots.meta["val"] = write.meta["val"] = _slots_value(base, src)       # copy_ returns its self
    for node in (slots, write):
        node.meta.update({k: v for k, v in scatter.meta.items() if k not in ("val", "tensor_meta")})
    scatter.replace_all_uses_with(base)
    graph.erase_node(scatter)


def write_inputs_in_place(gm: fx.GraphModule) -> int:
    """Rewrite the slice writes into graph inputs to happen in place; returns how many.

    A chain of scatters into one input (layers sharing one cache buffer, or two writes in one
    step) is rewritten from its first scatter on, as long as nothing reads the input after the
    scatter being rewritten; the write-back goes once the chain's last scatter is rewritten."""
    graph = gm.graph
    rewritten = 0
    for write_back in list(graph.find_nodes(op="call_function", target=_WRITE_BACK)):
        base = write_back.args[0]
        if base.op != "placeholder" or write_back.users:
            continue
        chain = _scatter_chain(write_back)
        for scatter in chain:
            if _read_after(base, scatter, write_back):
                break
            last = write_back.args[1] is scatter
            _write_in_place(scatter, base)
            rewritten += 1
            if last:                          # the write-back now copies the input onto itself
                graph.erase_node(write_back)
    if rewritten:
        graph.lint()
        gm.recompile()
    return rewritten
