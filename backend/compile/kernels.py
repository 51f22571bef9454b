"""Fusion groups -> kernel specs: the OpRecords of a kernel's ops and the HBM bytes it saves.

A kernel is described with the same ``OpRecord`` descriptors eager mode produces, so eager ops
and compiled kernels go through one cost path. What fusion changes is summarised by
``internal_bytes_saved``: the traffic the ops would move one by one (every input read, every
output written) minus what the kernel moves (each external input read once, each value that
leaves the kernel written once). Whether the kept intermediates really fit on chip is the
lowering's call; it spills (and counts) what does not.

Across kernels, what the Neuron compiler does for a whole graph is described here and costed
at feed time (``feed``):
- ``Handoff``: values one kernel computes and the next reads. Where they fit in SBUF beside
  both kernels' working sets they stay there: no HBM read in the consumer, and no write in
  the producer when nothing else reads them.
- ``ParamLayout``: a matmul operand that is a parameter seen through a layout view (the
  ``W.t()`` of a linear) is stored once in the layout the matmul wants: the kernel reads it
  with that layout, and the relayout (a copy) is paid at the first call only. A kernel that
  only lays out parameters is ``hoisted`` the same way. Parameters are the graph inputs
  AOTAutograd lists as static (``fusion.mark_parameters``); the optimiser's updates are taken
  to land in the laid-out copy, as in a whole-step Neuron graph.
"""
from __future__ import annotations

import operator
import re
from collections import ChainMap
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.utils._pytree import tree_leaves

from backend.recording import make_record
from backend.sim.flops import op_min_bytes, storage_bytes
from backend.sim.descriptors import OpRecord, TensorDesc

from .fusion import FusionGroup, escapes, is_parameter, lays_out_parameters, node_class, view_root
from .head_repeats import absorbed_head_repeats

__all__ = ["KernelSpec", "Handoff", "HandoffValue", "ParamLayout", "build_kernels", "source_line", "module_path",
           "node_sources", "has_symbolic_shapes", "ValueCapture"]

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_GUARD_NAME = re.compile(r"^L\['[^']*'\]")   # Dynamo's name of the compiled module: L['self']


@dataclass(slots=True)
class KernelSpec:
    """One compiled kernel as the simulator sessions take it."""

    name: str
    kind: str
    nodes: tuple
    records: list
    internal_bytes_saved: int
    source: str | None = None
    # dataflow inside the kernel, per record: for each input, (record, output) it comes from
    # in this kernel or None (read from HBM); for each output, whether it is stored to HBM
    inputs_from: tuple = ()
    outputs_to_hbm: tuple = ()
    # across kernels (see the module docstring)
    handoff_in: Handoff | None = None       # from the previous kernel
    handoff_out: Handoff | None = None      # to the next kernel
    layouts: tuple = ()                     # ParamLayouts this kernel's records already assume
    hoisted: bool = False                   # only lays out parameters: runs at the first call
    done: bool = False                      # hoisted and the graph has run once

    @property
    def hbm_bytes_unfused(self) -> int:
        return sum(op_min_bytes(r) for r in self.records)


@dataclass(frozen=True, slots=True)
class HandoffValue:
    """One value a kernel passes to the next: where it is made and read, and its size."""

    output: tuple            # (record, output) in the producer
    inputs: tuple            # (record, input) positions in the consumer that read it
    nbytes: int
    exclusive: bool          # only the consumer reads it: the producer need not store it


@dataclass(eq=False, slots=True)
class Handoff:
    """Values ``producer`` computes that the kernel right after it, ``consumer``, reads."""

    producer: KernelSpec = field(repr=False)
    consumer: KernelSpec = field(repr=False)
    values: tuple = ()
    kept: dict = field(default_factory=dict)     # target name -> values kept in SBUF (feed decides)


@dataclass(eq=False, slots=True)
class ParamLayout:
    """A parameter laid out once (first call) in the layout a kernel reads it in."""

    parameter: str           # the graph input's name
    record: OpRecord         # the relayout: a copy from the parameter's view to the new layout
    done: bool = False       # the graph has run once: every later call reads the laid-out copy


def source_line(node: fx.Node) -> str | None:
    """``file:line`` of the user code that produced a node (innermost frame of its trace).

    Dynamo keeps no user frame for code that lives entirely in torch (``nn.Sequential`` of
    built-in layers); the module path (``Sequential.1 (GELU)``) stands in for it then.
    """
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if frames:
        path, line = frames[-1]
        return f"{path}:{line}"
    return module_path(node)


def node_sources(graph: fx.Graph, forward: fx.Graph | None = None) -> dict:
    """Node name -> source for every node that has one. Backward nodes carry no trace of
    their own; they take the source of the forward node with the same autograd ``seq_nr``."""
    by_seq = {}
    if forward is not None:
        for node in forward.nodes:
            src = source_line(node)
            if src and "seq_nr" in node.meta:
                by_seq.setdefault(node.meta["seq_nr"], src)
    out = {}
    for node in graph.nodes:
        src = source_line(node) or by_seq.get(node.meta.get("seq_nr"))
        if src:
            out[node.name] = src
    return out


def module_path(node: fx.Node) -> str | None:
    """``Root.sub.layer (Type)`` of the innermost nn.Module a node came from."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    entries = list(stack.values())
    root_type, leaf_path, leaf_type = entries[0][1], entries[-1][0], entries[-1][1]
    path = _GUARD_NAME.sub("", str(leaf_path)).lstrip(".")
    name = getattr(root_type, "__name__", str(root_type))
    leaf = getattr(leaf_type, "__name__", str(leaf_type))
    return f"{name}.{path} ({leaf})" if path else f"{name} ({leaf})"


def _tensors(value) -> list:
    """The tensors in a node's value (one tensor, or a tuple such as native_layer_norm's)."""
    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor)]


def has_symbolic_shapes(graph: fx.Graph) -> bool:
    """True if any value's shape is symbolic (``dynamic=True``): records need run-time shapes."""
    for node in graph.nodes:
        for t in _tensors(node.meta.get("val")):
            if any(not isinstance(s, int) for s in (*t.shape, *t.stride())):
                return True
    return False


class ValueCapture(fx.Interpreter):
    """Runs a graph module and keeps every node's value (to describe run-time shapes)."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm, garbage_collect_values=False)
        self.values: dict = {}

    def run_node(self, n: fx.Node):
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def _tensor_inputs(node: fx.Node, values: dict) -> list:
    """(input node, tensor) per tensor operand, in the order eager mode reports inputs."""
    inputs: list = []
    fx.node.map_arg((node.args, node.kwargs), inputs.append)
    return [(i, t) for i in inputs for t in _tensors(values.get(i.name))]


def _record(node: fx.Node, values: dict, sources: dict) -> OpRecord:
    host_inputs = [t for _, t in _tensor_inputs(node, values)]
    record = make_record(node.target, node.args, node.kwargs, host_inputs,
                         _tensors(values.get(node.name)))
    record.source = sources.get(node.name)
    return record


def _produced_by(node: fx.Node) -> tuple:
    """(node that computed the value, output index): through views and tuple getitems."""
    while node.op == "call_function" and node_class(node) == "view":
        if node.target is operator.getitem:
            return node.args[0], node.args[1]
        node = node.args[0] if isinstance(node.args[0], fx.Node) else node.all_input_nodes[0]
    return node, 0


def _dataflow(compute: list, members: set, values: dict) -> tuple:
    """Per record: where each input comes from ((record, output) inside the kernel, or None
    for HBM) and whether each output must be stored to HBM (it leaves the kernel)."""
    index = {n: i for i, n in enumerate(compute)}
    inputs_from = []
    for node in compute:
        links = []
        for i, _ in _tensor_inputs(node, values):
            producer, k = _produced_by(i)
            links.append((index[producer], k) if producer in index else None)
        inputs_from.append(tuple(links))
    stores = []
    for node in compute:
        value = values.get(node.name)
        if isinstance(value, (tuple, list)):
            escaping = {u.args[1] for u in node.users if u not in members or escapes(u, members)}
            stores.append(tuple(k in escaping for k, v in enumerate(value) if isinstance(v, torch.Tensor)))
        else:
            stores.append((escapes(node, members),) * len(_tensors(value)))
    return tuple(inputs_from), tuple(stores)


def _desc_bytes(t: torch.Tensor) -> int:
    desc = TensorDesc(tuple(t.shape), str(t.dtype)[6:], tuple(t.stride()))
    return storage_bytes(desc)


def _escaping_bytes(node: fx.Node, values: dict, members: set) -> int:
    """Bytes written for a member's values that are used outside the kernel."""
    value = values.get(node.name)
    if not isinstance(value, (tuple, list)):
        return sum(_desc_bytes(t) for t in _tensors(value))
    # tuple outputs (native_layer_norm's out, mean, rstd) leave through getitem nodes
    return sum(_desc_bytes(t) for user in node.users
               if user not in members or escapes(user, members)
               for t in _tensors(values.get(user.name)))


def _compute(group: FusionGroup, by_name: dict) -> tuple[list, set, dict]:
    """A kernel's compute nodes (one record each), its member nodes, and the repeated K/V operands
    its grouped-query attention reads unrepeated (``head_repeats``): their copies run no more."""
    members = {by_name[n] for n in group.nodes}
    compute = [n for n in (by_name[name] for name in group.nodes) if node_class(n) != "view"]
    absorbed, unrepeated = absorbed_head_repeats(compute, members)
    return [n for n in compute if n not in absorbed], members - absorbed, unrepeated


def _kernel(group: FusionGroup, by_name: dict, values: dict, sources: dict) -> KernelSpec:
    compute, members, unrepeated = _compute(group, by_name)
    if unrepeated:
        values = ChainMap({view.name: values.get(src.name) for view, src in unrepeated.items()}, values)
    records = [_record(n, values, sources) for n in compute]
    eager_bytes = sum(op_min_bytes(r) for r in records)
    read = sum(_desc_bytes(t) for name in group.inputs for t in _tensors(values.get(name)))
    consumed_roots = _read_bound(compute, members, values)
    read = min(read, consumed_roots) if consumed_roots else read
    write = sum(_escaping_bytes(by_name[name], values, members) for name in group.outputs)
    source = next((s for s in (sources.get(n.name) for n in compute) if s), None)
    inputs_from, outputs_to_hbm = _dataflow(compute, members, values)
    return KernelSpec(name=group.name, kind=group.kind, nodes=tuple(group.nodes), records=records,
                      internal_bytes_saved=max(0, eager_bytes - read - write), source=source,
                      inputs_from=inputs_from, outputs_to_hbm=outputs_to_hbm)


def _read_bound(compute: list, members: set, values: dict) -> int:
    """Bytes of the external views the kernel reads (a slice reads less than its base)."""
    seen: dict = {}
    for node in compute:
        for i in node.all_input_nodes:
            if view_root(i) not in members and i.name not in seen:
                seen[i.name] = sum(_desc_bytes(t) for t in _tensors(values.get(i.name)))
    return sum(seen.values())


def build_kernels(gm: fx.GraphModule, groups: list, values: dict | None = None,
                  sources: dict | None = None) -> list[KernelSpec]:
    """Kernel specs for ``groups`` of ``gm``; ``values`` maps node names to (fake or real)
    values, defaulting to the ``meta["val"]`` tracing left on each node; ``sources`` maps node
    names to source lines (default: ``node_sources``)."""
    by_name = {n.name: n for n in gm.graph.nodes}
    if values is None:
        values = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    if sources is None:
        sources = node_sources(gm.graph)
    kernels = [_kernel(g, by_name, values, sources) for g in groups]
    layouts: dict = {}
    for group, kernel in zip(groups, kernels):
        kernel.hoisted = lays_out_parameters([by_name[n] for n in group.nodes])
        if not kernel.hoisted:
            _lay_out_parameters(kernel, group, by_name, layouts)
    for (g0, k0), (g1, k1) in zip(zip(groups, kernels), zip(groups[1:], kernels[1:])):
        if not (k0.hoisted or k1.hoisted):
            _link(k0, g0, k1, g1, by_name, values)
    return kernels


# -- what the compiler does across kernels ----------------------------------------------------
# matmul-like ops -> position of the moving operand B[K, N]; TensorE reads it K-major
_MOVING_OPERAND = {"aten::mm": 1, "aten::bmm": 1, "aten::addmm": 2, "aten::baddbmm": 2, "aten::matmul": 1}


def _schema_name(node: fx.Node) -> str:
    return node.target._schema.name if isinstance(node.target, torch._ops.OpOverload) else ""


def _lay_out_parameters(kernel: KernelSpec, group: FusionGroup, by_name: dict, layouts: dict) -> None:
    """Read parameters seen through a layout view as matmul operands in the layout TensorE
    wants (row-major B[K, N]); the copy that makes it is a ParamLayout paid once."""
    compute = _compute(group, by_name)[0]
    used = []
    for j, node in enumerate(compute):
        pos = _MOVING_OPERAND.get(_schema_name(node))
        record = kernel.records[j]
        if pos is None or pos >= len(record.inputs) or pos >= len(node.args) or not isinstance(node.args[pos], fx.Node):
            continue
        operand, desc = node.args[pos], record.inputs[pos]
        root = view_root(operand)
        if operand is root or not is_parameter(root) or len(desc.shape) < 2 or desc.strides is None \
                or desc.is_contiguous:
            continue
        laid_out = TensorDesc(desc.shape, desc.dtype)
        key = (root.name, desc.shape, desc.strides, desc.dtype)
        if key not in layouts:
            layouts[key] = ParamLayout(root.name, OpRecord(0, "aten::clone", (desc,), (laid_out,),
                                                           source=record.source))
        record.inputs = (*record.inputs[:pos], laid_out, *record.inputs[pos + 1:])
        if layouts[key] not in used:
            used.append(layouts[key])
    kernel.layouts = tuple(used)


def _readers(node: fx.Node, k: int | None = None) -> list:
    """The non-view nodes that read output ``k`` of ``node`` (through views and getitems)."""
    out = []
    for user in node.users:
        if k is not None and user.target is operator.getitem:
            if user.args[1] == k:
                out += _readers(user)
        elif user.op == "call_function" and node_class(user) == "view":
            out += _readers(user)
        else:
            out.append(user)
    return out


def _link(producer: KernelSpec, pgroup: FusionGroup, consumer: KernelSpec, cgroup: FusionGroup,
          by_name: dict, values: dict) -> None:
    """The Handoff between two consecutive kernels, if the second reads what the first made."""
    made_by = _compute(pgroup, by_name)[0]
    made = {node.name: j for j, node in enumerate(made_by)}
    members = {by_name[n] for n in cgroup.nodes}
    reads: dict = {}
    for j, node in enumerate(_compute(cgroup, by_name)[0]):
        for i, (operand, _) in enumerate(_tensor_inputs(node, values)):
            source, k = _produced_by(operand)
            if source.name in made:
                reads.setdefault((made[source.name], k), []).append((j, i))
    found = []
    for (j, k), inputs in reads.items():
        source = made_by[j]
        tuple_value = isinstance(values.get(source.name), (tuple, list))
        exclusive = all(r in members for r in _readers(source, k if tuple_value else None))
        if k < len(producer.records[j].outputs):
            found.append(HandoffValue((j, k), tuple(inputs), producer.records[j].outputs[k].nbytes, exclusive))
    if found:
        producer.handoff_out = consumer.handoff_in = Handoff(producer, consumer, tuple(found))
