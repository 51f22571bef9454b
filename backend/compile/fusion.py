"""Fusion pass: partition an aten FX graph into kernels the way a Neuron compiler would.

Rules, applied greedily in topological order:
- views (``view``, ``t``, ``expand``, ``getitem``, ...) are free: they belong to no kernel, and
  dependencies are tracked through them to the value they alias;
- a matmul anchors a kernel; pointwise consumers of the same size (bias add, activation,
  residual add, scale) join it as its epilogue, applied to the PSUM tile before write-back;
- an attention block (matmul -> pointwise -> softmax -> matmul) stays one kernel when one row
  of scores fits a SBUF partition, so the score matrix never goes to HBM;
- pointwise chains, reductions and at most one normalisation (softmax, layer/rms/batch norm)
  fuse into one vector kernel, so a residual add + layer norm or a decomposed softmax is one
  kernel;
- everything else (gathers, scatters, copies into inputs, host fallbacks) is its own kernel.

A node may only join the newest kernel among its inputs' kernels; every other input then comes
from an older kernel, so kernels stay a DAG and can run in creation order.

``mark_parameters`` flags the graph inputs that are parameters or buffers, so the compiled
kernels can lay out constant weights once (``kernels.ParamLayout``).
"""
from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from backend.sim.flops import base_name, is_matmul_like

__all__ = ["FusionGroup", "fuse", "node_class", "view_root", "escapes", "mark_parameters", "is_parameter",
           "lays_out_parameters", "PARAMETER_META"]

log = logging.getLogger(__name__)

_NORMS = frozenset({
    "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training", "aten::_native_batch_norm_legit_functional",
    "aten::native_batch_norm_backward", "aten::native_group_norm",
    "aten::native_group_norm_backward", "aten::_log_softmax", "aten::_log_softmax_backward_data",
    "aten::_softmax_backward_data",
})
_SOFTMAX = "aten::_softmax"
# Ops without the pointwise tag that still stream elements through the vector engines.
_POINTWISE_EXTRA = frozenset({
    "aten::_to_copy", "aten::native_dropout", "aten::native_dropout_backward", "aten::fill",
    "aten::full", "aten::full_like", "aten::zeros_like", "aten::ones_like", "aten::empty_like",
    "aten::scalar_tensor", "aten::rand_like", "aten::randn_like", "aten::zeros", "aten::ones",
    "aten::empty", "aten::tril", "aten::triu", "aten::arange", "aten::iota",
})
# Reshapes that FX graphs use as copies-free views.
_VIEW_EXTRA = frozenset({"aten::_unsafe_view", "aten::reshape", "aten::alias", "aten::detach",
                         "aten::lift_fresh", "aten::lift_fresh_copy"})


def node_class(node: fx.Node) -> str:
    """What kind of work a node is: view, matmul, softmax, norm, reduction, pointwise,
    opaque, or io (placeholders, outputs, attributes, symbolic scalars)."""
    if node.op != "call_function":
        return "io"
    target = node.target
    if target is operator.getitem:
        return "view"
    if not isinstance(target, torch._ops.OpOverload):
        return "io"          # sym-int arithmetic and other Python scalars
    name = base_name(target._schema.name)
    if target.is_view or name in _VIEW_EXTRA:
        return "view"
    if is_matmul_like(name):
        return "matmul"
    if name == _SOFTMAX:
        return "softmax"
    if name in _NORMS:
        return "norm"
    tags = target.tags
    if torch.Tag.reduction in tags:
        return "reduction"
    if torch.Tag.pointwise in tags or name in _POINTWISE_EXTRA:
        return "pointwise"
    return "opaque"


def view_root(node: fx.Node) -> fx.Node:
    """The node whose value ``node`` aliases (itself unless it is a view)."""
    while node.op == "call_function" and node_class(node) == "view" and node.all_input_nodes:
        node = node.args[0] if isinstance(node.args[0], fx.Node) else node.all_input_nodes[0]
    return node


@dataclass
class FusionGroup:
    """One kernel: FX nodes that run as one program, with what crosses its boundary."""

    index: int
    kind: str                                   # matmul, attention, norm, reduction, pointwise, opaque
    nodes: list = field(default_factory=list)   # FX node names, compute nodes and absorbed views
    inputs: list = field(default_factory=list)  # external nodes read (view roots, in order)
    outputs: list = field(default_factory=list)  # member nodes whose values leave the kernel
    name: str = ""
    # fusion state
    has_norm: bool = False
    has_reduction: bool = False
    awaiting_pv: bool = False                   # attention: softmax done, second matmul pending
    matmul_numel: object = None                 # int, or SymInt with dynamic shapes
    max_dep: int = -1                           # newest kernel this one reads from


def _numel(node: fx.Node):
    """Element count of a node's value (a SymInt with dynamic shapes), or None."""
    val = node.meta.get("val")
    return val.numel() if isinstance(val, torch.Tensor) else None


def _known(cond) -> bool:
    """True only if ``cond`` holds for every size a dynamic graph may see. Never adds a guard:
    a fusion decision must not specialise the graph (that would force recompiles)."""
    return statically_known_true(cond) if isinstance(cond, torch.SymBool) else bool(cond)


def _row_fits(node: fx.Node, budget: int) -> bool:
    """One row (last dim) of a node's value, with working buffers, fits ``budget`` bytes."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        return False
    return _known(8 * val.shape[-1] * val.element_size() <= budget)


class _Partitioner:
    def __init__(self, graph: fx.Graph, sbuf_partition_bytes: int, enabled: bool):
        self.graph = graph
        self.sbuf_partition_bytes = sbuf_partition_bytes
        self.enabled = enabled
        self.groups: list[FusionGroup] = []
        self.group_of: dict[fx.Node, FusionGroup] = {}
        self._created = 0

    def run(self) -> list[FusionGroup]:
        for node in self.graph.nodes:
            cls = node_class(node)
            if cls in ("io", "view"):
                continue
            if not self.enabled:
                self._new_group(node, cls)
                continue
            prologues = self._prologues(node) if cls != "opaque" else []
            target = self._candidate(node, prologues)
            if target is None or not self._join(target, node, cls):
                self._new_group(node, cls)
            group = self.group_of[node]
            for prologue in prologues:
                self._merge(prologue, group)
        for i, group in enumerate(self.groups):
            group.index = i
        self._attach_views()
        self._boundaries()
        return self.groups

    # -- grouping --------------------------------------------------------------------------
    def _input_groups(self, node: fx.Node) -> list[FusionGroup]:
        groups = []
        for i in node.all_input_nodes:
            g = self.group_of.get(view_root(i))
            if g is not None and g not in groups:
                groups.append(g)
        return groups

    def _prologues(self, node: fx.Node) -> list[FusionGroup]:
        """Pointwise kernels that feed only ``node`` (a cast, a contiguous copy, a mask): they
        fold into whichever kernel ``node`` lands in, computed while its operands load. A
        kernel that only lays out parameters stays apart: it runs once, not every call."""
        return [g for g in self._input_groups(node)
                if g.kind == "pointwise" and all(self._only_feeds(m, g, node) for m in g.nodes)
                and not lays_out_parameters(g.nodes)]

    def _only_feeds(self, member: fx.Node, group: FusionGroup, node: fx.Node) -> bool:
        for user in member.users:
            # graph outputs (values saved for backward) are fine: the kernel still writes them
            if user is node or user.op == "output" or self.group_of.get(user) is group:
                continue
            if node_class(user) == "view" and self._only_feeds(user, group, node):
                continue
            return False
        return True

    def _candidate(self, node: fx.Node, prologues: list) -> FusionGroup | None:
        """The newest kernel among the node's inputs, not counting prologues (the only one it
        may join). Prologues that read from that kernel or a newer one cannot fold into it, so
        they stay kernels of their own and count as candidates."""
        groups = self._input_groups(node)
        while True:
            rest = [g for g in groups if g not in prologues]
            target = max(rest, key=lambda g: g.index) if rest else None
            late = [p for p in prologues if target is not None and p.max_dep >= target.index]
            if not late:
                return target
            prologues[:] = [p for p in prologues if p not in late]

    def _merge(self, prologue: FusionGroup, group: FusionGroup) -> None:
        if prologue is group:
            return
        for node in prologue.nodes:
            self._add(group, node)
        self.groups.remove(prologue)

    def _join(self, group: FusionGroup, node: fx.Node, cls: str) -> bool:
        kind = group.kind
        if "opaque" in (kind, cls):
            return False
        if kind in ("matmul", "attention"):
            ok = self._join_matmul(group, node, cls)
        elif cls == "matmul":
            ok = False
        elif cls in ("norm", "softmax"):
            ok = not group.has_norm
            if ok:
                group.has_norm = True
                group.kind = "norm"
        elif cls == "reduction":
            group.has_reduction = True
            group.kind = "norm" if group.has_norm else "reduction"
            ok = True
        else:  # pointwise into a vector kernel
            ok = True
        if ok:
            self._add(group, node)
        return ok

    def _join_matmul(self, group: FusionGroup, node: fx.Node, cls: str) -> bool:
        if cls == "pointwise":
            # An epilogue works on the accumulator tile: it may not broadcast it up.
            numel = _numel(node)
            return numel is not None and group.matmul_numel is not None and _known(numel == group.matmul_numel)
        if cls == "softmax" and group.kind == "matmul" and not group.has_norm:
            if not _row_fits(node, self.sbuf_partition_bytes):
                log.debug("%s: score row does not fit SBUF, attention not fused", node.name)
                return False
            group.kind, group.has_norm, group.awaiting_pv = "attention", True, True
            return True
        if cls == "matmul" and group.awaiting_pv and isinstance(node.args[0], fx.Node) \
                and self.group_of.get(view_root(node.args[0])) is group:
            group.awaiting_pv = False
            group.matmul_numel = _numel(node)
            return True
        return False

    def _new_group(self, node: fx.Node, cls: str) -> None:
        kind = {"softmax": "norm", "view": "pointwise"}.get(cls, cls)
        self._created += 1   # creation order; list positions shift when prologues merge away
        group = FusionGroup(index=self._created, kind=kind,
                            has_norm=cls in ("norm", "softmax"), has_reduction=cls == "reduction",
                            matmul_numel=_numel(node) if cls == "matmul" else None)
        self.groups.append(group)
        self._add(group, node)

    def _add(self, group: FusionGroup, node: fx.Node) -> None:
        group.nodes.append(node)
        self.group_of[node] = group
        for g in self._input_groups(node):
            if g is not group:
                group.max_dep = max(group.max_dep, g.index)

    # -- finishing -------------------------------------------------------------------------
    def _attach_views(self) -> None:
        """A view whose producer and every consumer share a kernel is drawn inside it."""
        for node in self.graph.nodes:
            if node_class(node) == "view":
                group = self.group_of.get(view_root(node))
                if group is not None and self._owner(node) is group:
                    self.group_of[node] = group
        for group in self.groups:
            group.nodes = []
        for node in self.graph.nodes:
            group = self.group_of.get(node)
            if group is not None:
                group.nodes.append(node)

    def _owner(self, node: fx.Node) -> FusionGroup | None:
        """The one kernel that consumes a view (through chained views), else None."""
        owners = set()
        for user in node.users:
            owner = self._owner(user) if node_class(user) == "view" else self.group_of.get(user)
            owners.add(id(owner) if owner is not None else None)
            if owner is None or len(owners) > 1:
                return None
            found = owner
        return found if owners else None

    def _boundaries(self) -> None:
        for group in self.groups:
            members = set(group.nodes)
            inputs: dict = {}
            for node in group.nodes:
                if node_class(node) == "view":
                    continue
                for i in node.all_input_nodes:
                    root = view_root(i)
                    if root not in members and _is_tensor(root):
                        inputs[root] = None
            group.inputs = [n.name for n in inputs]
            group.outputs = [n.name for n in group.nodes
                             if node_class(n) != "view" and escapes(n, members)]
            group.name = _kernel_name(group)
            group.nodes = [n.name for n in group.nodes]


def _is_tensor(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) or (
        isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val))


def escapes(node: fx.Node, members: set) -> bool:
    """True if the node's value (or a view of it) is used outside the kernel ``members``, or the
    node writes into its operand in place (``copy_`` into a graph input): that write is its point."""
    if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
        return True
    for user in node.users:
        if user not in members:
            return True
        if node_class(user) == "view" and escapes(user, members):
            return True
    return False


_NAME_ORDER = {"matmul": 0, "softmax": 1, "norm": 1, "reduction": 2}


def _kernel_name(group: FusionGroup) -> str:
    """``k<i>_<kind>_<ops>``: the anchor ops (matmuls, then norms) lead the op list."""
    ops = []
    compute = [n for n in group.nodes if node_class(n) not in ("view", "io")]
    for node in sorted(compute, key=lambda n: _NAME_ORDER.get(node_class(n), 3)):
        op = node.target._schema.name.split("::")[-1].lstrip("_")
        if op not in ops:
            ops.append(op)
    body = "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")
    return f"k{group.index}_{group.kind}_{body}"


PARAMETER_META = "neuron_parameter"
# Copies that change only where elements sit (with the dtype kept): a layout, not a computation.
_LAYOUT_COPIES = frozenset({"aten::clone", "aten::contiguous", "aten::_to_copy", "aten::permute_copy",
                            "aten::transpose_copy", "aten::t_copy"})
_PRIMAL = re.compile(r"primals_(\d+)")


def is_parameter(node: fx.Node) -> bool:
    """True for a graph input that ``mark_parameters`` found to be a parameter or buffer."""
    return node.op == "placeholder" and bool(node.meta.get(PARAMETER_META))


def lays_out_parameters(nodes: list) -> bool:
    """True if ``nodes`` (FX compute nodes, views allowed) only copy parameters into another
    layout: every compute node is a dtype-keeping copy and every value read from outside is a
    parameter (through views)."""
    members = set(nodes)
    compute = [n for n in nodes if node_class(n) != "view"]
    for node in compute:
        target = node.target
        src = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
        val, src_val = node.meta.get("val"), src.meta.get("val") if src is not None else None
        if base_name(target._schema.name) not in _LAYOUT_COPIES or not isinstance(val, torch.Tensor) \
                or not isinstance(src_val, torch.Tensor) or src_val.dtype != val.dtype:
            return False
    outside = [view_root(i) for n in compute for i in n.all_input_nodes if view_root(i) not in members]
    return bool(compute) and bool(outside) and all(is_parameter(n) for n in outside)


def mark_parameters(graph: fx.Graph, static_inputs=None) -> int:
    """Flag the placeholders that hold parameters or buffers; returns how many.

    Dynamo passes parameters as graph inputs, and AOTAutograd lists their positions among the
    forward's inputs as ``static_input_indices`` (what CUDA graphs use to skip copying them),
    read from the active tracing context unless ``static_inputs`` is given. Forward and
    inference graphs take inputs in that order; a backward graph names the forward inputs it
    reads ``primals_<position + 1>``.
    """
    if static_inputs is None:
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        static_inputs = getattr(getattr(context, "fw_metadata", None), "static_input_indices", None) or ()
    static = set(static_inputs)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    backward = any(n.name.startswith("tangents") for n in placeholders)
    marked = 0
    for position, node in enumerate(placeholders):
        primal = _PRIMAL.fullmatch(node.name)
        index = int(primal.group(1)) - 1 if primal else (None if backward else position)
        if index in static:
            node.meta[PARAMETER_META] = True
            marked += 1
    return marked


def fuse(graph: fx.Graph, *, sbuf_partition_bytes: int = 208 * 1024,
         enabled: bool = True) -> list[FusionGroup]:
    """Partition ``graph`` into kernels (one per compute node when ``enabled`` is False).

    ``sbuf_partition_bytes`` is the target's usable SBUF per partition; an attention block is
    only fused when a row of its scores (plus working buffers) fits in it.
    """
    mark_parameters(graph)
    groups = _Partitioner(graph, sbuf_partition_bytes, enabled).run()
    log.debug("fused %d compute nodes into %d kernels",
              sum(1 for n in graph.nodes if node_class(n) not in ("io", "view")), len(groups))
    return groups
