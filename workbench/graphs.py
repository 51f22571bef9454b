"""A plain description of one compiled graph, as the compile layer hands it to the workbench.

The compile layer (``backend.compile``) owns Dynamo, fusion and kernels; the workbench only
needs nodes, edges, which fusion group each node landed in, what each kernel cost and where the
node came from in user code. ``CompiledGraph.coerce`` accepts this dataclass, a dict of the same
fields, or any object with those attributes (including an ``fx.Graph``-like ``graph`` whose nodes
carry ``all_input_nodes``), so the two layers do not have to move in lockstep.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["GraphNode", "CompiledGraph", "expand_graphs", "layered_layout"]


@dataclass(slots=True)
class GraphNode:
    name: str
    op: str = "call_function"          # FX opcode: placeholder, call_function, output, ...
    target: str = ""                   # "aten.mm.default", "relu", ...
    group: str | None = None           # fusion group / kernel the node was fused into
    cost_ns: float = 0.0               # simulated cost of that kernel, shared by its nodes
    source: str | None = None          # user source line "file.py:12"


@dataclass(slots=True)
class CompiledGraph:
    name: str
    nodes: list = field(default_factory=list)          # GraphNode
    edges: list = field(default_factory=list)          # (producer name, consumer name)
    fx_text: str = ""
    kernel_cost_ns: dict = field(default_factory=dict)  # kernel/group name -> ns
    graph_breaks: list = field(default_factory=list)   # reasons, as Dynamo reports them

    @property
    def groups(self) -> dict:
        """Fusion group -> node names, in node order."""
        out: dict = {}
        for node in self.nodes:
            if node.group is not None:
                out.setdefault(node.group, []).append(node.name)
        return out

    def to_dict(self) -> dict:
        data = asdict(self)
        data["edges"] = [list(e) for e in self.edges]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "CompiledGraph":
        nodes = [n if isinstance(n, GraphNode) else _node_from(n) for n in data.get("nodes", ())]
        costs = {str(k): float(v) for k, v in dict(data.get("kernel_cost_ns") or {}).items()}
        for node in nodes:
            if not node.cost_ns and node.group in costs:
                node.cost_ns = costs[node.group]
        return cls(name=str(data.get("name", "graph")), nodes=nodes,
                   edges=[(str(a), str(b)) for a, b in data.get("edges", ())],
                   fx_text=str(data.get("fx_text", "") or ""), kernel_cost_ns=costs,
                   graph_breaks=[str(b) for b in data.get("graph_breaks", ()) or ()])

    @classmethod
    def coerce(cls, obj: Any) -> "CompiledGraph":
        """Build from this dataclass, a dict, or an object exposing the same attributes."""
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, dict):
            return cls.from_dict(obj)
        if hasattr(obj, "to_dict"):
            return cls.from_dict(obj.to_dict())
        data = {key: getattr(obj, key) for key in ("name", "nodes", "edges", "fx_text",
                                                     "kernel_cost_ns", "graph_breaks")
                if hasattr(obj, key)}
        fx_graph = getattr(obj, "graph", None)
        if "nodes" not in data and fx_graph is not None and hasattr(fx_graph, "nodes"):
            data.update(_from_fx(fx_graph, getattr(obj, "node_groups", {}) or {}))
            data.setdefault("fx_text", str(fx_graph))
        if "nodes" not in data:
            raise TypeError(f"cannot read a compiled graph from {type(obj).__name__}: "
                            "expected nodes/edges or an fx graph")
        return cls.from_dict(data)


def expand_graphs(objs) -> list:
    """CompiledGraphs from what the compile layer registers: one per AOTAutograd part
    (forward/backward/inference) of a graph-log entry with ``parts`` and ``graph_dict(part)``,
    otherwise one per object."""
    out = []
    for obj in objs:
        parts = getattr(obj, "parts", None)
        if isinstance(parts, dict) and parts and callable(getattr(obj, "graph_dict", None)):
            out.extend(CompiledGraph.from_dict(obj.graph_dict(part)) for part in parts)
        elif callable(getattr(obj, "graph_dict", None)) and not isinstance(obj, (dict, CompiledGraph)):
            out.append(CompiledGraph.from_dict(obj.graph_dict()))
        else:
            out.append(CompiledGraph.coerce(obj))
    return out


def _node_from(obj: Any) -> GraphNode:
    if isinstance(obj, dict):
        get = obj.get
    else:
        def get(key, default=None):
            return getattr(obj, key, default)
    return GraphNode(name=str(get("name")), op=str(get("op", "call_function") or "call_function"),
                     target=str(get("target", "") or ""), group=get("group"),
                     cost_ns=float(get("cost_ns", 0.0) or 0.0), source=get("source"))


def _from_fx(graph: Any, node_groups: dict) -> dict:
    """Nodes and edges of an ``fx.Graph`` (duck-typed: no torch import here)."""
    nodes, edges = [], []
    for node in graph.nodes:
        stack = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
        source = _last_frame(stack)
        nodes.append(GraphNode(name=node.name, op=str(node.op), target=str(node.target),
                               group=node_groups.get(node.name), source=source))
        edges.extend((inp.name, node.name) for inp in node.all_input_nodes)
    return {"nodes": nodes, "edges": edges}


def _last_frame(stack_trace: str) -> str | None:
    """'File "m.py", line 12, in forward' -> 'm.py:12' for the innermost frame."""
    for line in reversed(stack_trace.splitlines()):
        line = line.strip()
        if line.startswith('File "') and ", line " in line:
            path = line[6:line.index('"', 6)]
            lineno = line.split(", line ", 1)[1].split(",", 1)[0]
            return f"{path}:{lineno}"
    return None


def layered_layout(graph: CompiledGraph) -> dict:
    """Node name -> (layer, slot): layer is the longest path from any input, so edges go right.

    Slots count from the top of each layer; a figure centres each layer on zero.
    """
    preds: dict = {n.name: [] for n in graph.nodes}
    for src, dst in graph.edges:
        if src in preds and dst in preds:
            preds[dst].append(src)
    layer: dict = {}
    for name in preds:
        if name not in layer:
            _assign_layer(name, preds, layer)
    # Inputs (weights, constants) sit just before their first consumer, not all at depth 0.
    succs: dict = {}
    for src, dst in graph.edges:
        if src in preds and dst in preds:
            succs.setdefault(src, []).append(dst)
    for name in preds:
        if not preds[name] and name in succs:
            layer[name] = max(0, min(layer[d] for d in succs[name]) - 1)
    by_layer: dict = {}
    for node in graph.nodes:
        by_layer.setdefault(layer[node.name], []).append(node.name)
    # One barycentre sweep: place each node near the mean height of its inputs to cut crossings.
    height: dict = {}
    position: dict = {}
    for lvl in sorted(by_layer):
        names = by_layer[lvl]

        def centre(name, i, names=names):
            ys = [height[p] for p in preds[name] if p in height]
            return sum(ys) / len(ys) if ys else i - (len(names) - 1) / 2

        names = [n for _, _, n in sorted((centre(n, i), i, n) for i, n in enumerate(names))]
        for slot, name in enumerate(names):
            position[name] = (lvl, slot)
            height[name] = slot - (len(names) - 1) / 2
    return {node.name: position[node.name] for node in graph.nodes}

def _assign_layer(name: str, preds: dict, layer: dict) -> None:
    """Iterative DFS (graphs can be thousands of nodes deep); back edges of a cycle are ignored."""
    on_path = {name}
    stack = [(name, iter(preds[name]))]
    while stack:
        node, todo = stack[-1]
        for pred in todo:
            if pred not in layer and pred not in on_path:
                on_path.add(pred)
                stack.append((pred, iter(preds[pred])))
                break
        else:
            stack.pop()
            on_path.discard(node)
            layer[node] = 1 + max((layer[p] for p in preds[node] if p in layer), default=-1)
