"""Grouped-query attention in a compiled graph: K/V head repeats that the attention kernel reads through.

Traced on the host, grouped-query attention arrives as K and V repeated per query head before
the attention op: ``enable_gqa`` decomposes to ``repeat_interleave`` and Hugging Face's
``repeat_kv`` is the same copy written by hand, both ``unsqueeze -> expand -> clone -> view``
(``[B, Hkv, S, D] -> [B, Hkv * G, S, D]``). A Neuron flash kernel indexes the KV head of each
query head instead (``kv_head = head // G``), so the copy never runs: where the copy lands in
the attention's kernel and nothing else reads it, the kernel reads the unrepeated K/V, and
the lowering sees grouped-query attention.
"""
from __future__ import annotations

import torch
from torch import fx

from backend.sim.flops import base_name

from .fusion import node_class

__all__ = ["absorbed_head_repeats"]

# attention forwards (key and value are operands 1 and 2); a training graph saves the repeated
# K/V for the backward, so its copy leaves the kernel and stays
_ATTENTION = frozenset({"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
                        "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                        "aten::_scaled_dot_product_fused_attention_overrideable", "aten::scaled_dot_product_attention"})
_MERGING_VIEWS = frozenset({"aten::_unsafe_view", "aten::view", "aten::reshape"})


def _name(node: fx.Node) -> str:
    target = node.target
    return base_name(target._schema.name) if isinstance(target, torch._ops.OpOverload) else ""


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _repeat_source(operand: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(clone, unrepeated tensor) if ``operand`` is ``view(clone(expand(unsqueeze(x, d))))`` that
    repeats each of ``x``'s heads (dim ``d - 1``) in place; else None."""
    if _name(operand) not in _MERGING_VIEWS or not isinstance(operand.args[0], fx.Node):
        return None
    clone = operand.args[0]
    if _name(clone) != "aten::clone" or not isinstance(clone.args[0], fx.Node):
        return None
    expand = clone.args[0]
    if _name(expand) != "aten::expand" or not isinstance(expand.args[0], fx.Node):
        return None
    unsqueeze = expand.args[0]
    if _name(unsqueeze) != "aten::unsqueeze" or not isinstance(unsqueeze.args[0], fx.Node):
        return None
    source = unsqueeze.args[0]
    src, out, wide = _shape(source), _shape(operand), _shape(expand)
    if src is None or out is None or wide is None or len(src) < 2 or len(wide) != len(src) + 1:
        return None
    dim = unsqueeze.args[1] % len(wide)
    heads = dim - 1
    repeated = (*src[:heads], src[heads] * wide[dim], *src[heads + 1:])
    if heads < 0 or out != repeated or wide[:dim] + wide[dim + 1:] != src:
        return None
    return clone, source


def _only_read_by(node: fx.Node, readers: set) -> bool:
    """Every use of ``node`` (through views) is one of ``readers``."""
    for user in node.users:
        if user in readers:
            continue
        if user.op == "call_function" and node_class(user) == "view" and _only_read_by(user, readers):
            continue
        return False
    return True


def absorbed_head_repeats(compute: list, members: set) -> tuple[set, dict]:
    """The head-repeat clones of a kernel (``compute`` nodes, ``members`` all its nodes) that its
    attention ops read through, and for each repeated operand (the view the attention reads)
    the unrepeated tensor's node to describe it with."""
    clones, sources = set(), {}
    attention = {n for n in compute if _name(n) in _ATTENTION}
    for node in attention:
        for position in (1, 2):
            operand = node.args[position] if position < len(node.args) else None
            found = _repeat_source(operand) if isinstance(operand, fx.Node) else None
            if found is None:
                continue
            clone, source = found
            if clone in members and _only_read_by(clone, attention):
                clones.add(clone)
                sources[operand] = source
    return clones, sources
