"""The log of what the ``neuron`` backend compiled, kept for inspection.

One ``CompiledGraphInfo`` per Dynamo graph (one frame's compile, or one piece between graph
breaks). It holds its AOTAutograd parts (forward, backward, or inference), each with readable
FX text, fusion groups and per-kernel simulated cost, plus the graph breaks Dynamo hit while
tracing it and, for a recompile, the guard failures that caused it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import fx

from .costing import KernelCost, cost_kernels
from .fusion import node_class
from .state import STATE

__all__ = ["CompiledGraphInfo", "CompiledPartInfo", "compiled_graphs", "reset",
           "new_graph", "add_part", "graph_breaks", "recompile_reasons"]


@dataclass
class CompiledPartInfo:
    """One AOTAutograd graph (forward, backward or inference) as the backend compiled it."""

    part: str
    graph_module: fx.GraphModule
    groups: list                                # FusionGroup, in execution order
    sources: dict = field(default_factory=dict)  # node name -> user source line
    _kernels: list = field(default_factory=list)  # KernelSpec, once shapes are known
    _costs: dict | None = None
    target: str = ""
    # id -> records of every kernel built for this part (all shapes), kept alive so ids stay
    # unique: a sink fed a kernel's records can tell which graph ran (``built``).
    _built: dict = field(default_factory=dict)

    @property
    def kernels(self) -> list:
        return self._kernels

    @kernels.setter
    def kernels(self, kernels: list) -> None:
        self._kernels, self._costs = kernels, None
        self._built.update((id(k.records), k.records) for k in kernels)

    def built(self, records) -> bool:
        """Whether ``records`` (a kernel's record list, as sinks are fed it) is one of this part's kernels."""
        return self._built.get(id(records)) is records

    @property
    def costs(self) -> dict:
        """Kernel name -> KernelCost on the selected target, simulated on first access (empty
        until the kernels' shapes are known: after the first call for dynamic graphs)."""
        if self._costs is None and self._kernels:
            self._costs, self.target = cost_kernels(self._kernels)
        return self._costs or {}

    @property
    def fx_text(self) -> str:
        return self.graph_module.print_readable(print_output=False, include_stride=False)

    @property
    def fusion_groups(self) -> dict:
        """Kernel name -> FX node names."""
        return {g.name: list(g.nodes) for g in self.groups}

    @property
    def kernel_count(self) -> int:
        return len(self.groups)

    @property
    def op_count(self) -> int:
        """Compute nodes (what eager mode would launch, views excluded)."""
        return sum(1 for n in self.graph_module.graph.nodes if node_class(n) not in ("io", "view"))

    def graph_dict(self, name: str = "graph", graph_breaks=()) -> dict:
        """Nodes, edges and costs in the shape ``workbench.graphs.CompiledGraph.from_dict`` reads."""
        group_of = {n: g.name for g in self.groups for n in g.nodes}
        cost_ns = {k: c.time_ns for k, c in self.costs.items()}
        nodes, edges = [], []
        for node in self.graph_module.graph.nodes:
            group = group_of.get(node.name)
            nodes.append({"name": node.name, "op": node.op, "target": _target(node), "group": group,
                          "cost_ns": cost_ns.get(group, 0.0), "source": self.sources.get(node.name)})
            edges += [(i.name, node.name) for i in node.all_input_nodes]
        return {"name": f"{name}/{self.part}", "nodes": nodes, "edges": edges,
                "fx_text": self.fx_text, "kernel_cost_ns": cost_ns,
                "graph_breaks": list(graph_breaks)}


def _target(node: fx.Node) -> str:
    if node.op == "call_function":
        return str(node.target) if isinstance(node.target, torch._ops.OpOverload) else getattr(
            node.target, "__name__", str(node.target))
    return str(node.target)


@dataclass
class CompiledGraphInfo:
    """One Dynamo graph compiled by the ``neuron`` backend."""

    name: str
    compile_id: str
    frame: str                                   # the Python function Dynamo traced
    graph_breaks: list = field(default_factory=list)      # reasons hit while tracing this frame
    recompile_reasons: list = field(default_factory=list)  # guard failures (recompiles only)
    dynamic: bool = False                        # some sizes are symbolic (one graph, many shapes)
    mode: str = "default"
    parts: dict = field(default_factory=dict)    # "forward"/"backward"/"inference" -> CompiledPartInfo

    @property
    def is_recompile(self) -> bool:
        return bool(self.recompile_reasons) or not self.compile_id.endswith("/0")

    @property
    def forward(self) -> CompiledPartInfo | None:
        return self.parts.get("forward") or self.parts.get("inference")

    @property
    def backward(self) -> CompiledPartInfo | None:
        return self.parts.get("backward")

    @property
    def fx_text(self) -> str:
        return "\n".join(f"# ---- {p.part} ----\n{p.fx_text}" for p in self.parts.values())

    @property
    def fusion_groups(self) -> dict:
        """Kernel name -> node names over all parts (part-qualified names)."""
        return {f"{p.part}.{k}": v for p in self.parts.values() for k, v in p.fusion_groups.items()}

    def ran(self, kernel_records) -> bool:
        """Whether any of ``kernel_records`` (record lists sinks were fed) came from this graph."""
        return any(p.built(r) for p in self.parts.values() for r in kernel_records)

    def kernel_costs(self) -> list[KernelCost]:
        return [c for p in self.parts.values() for c in p.costs.values()]

    def graph_dict(self, part: str = "forward") -> dict:
        """Graph description for the workbench figure (``part``: forward, backward, inference)."""
        info = self.parts.get(part) or (self.forward if part == "forward" else None)
        if info is None:
            raise KeyError(f"graph {self.name} has no {part} part (has {sorted(self.parts)})")
        return info.graph_dict(self.name, self.graph_breaks)

    def to_record(self) -> dict:
        fw, bw = self.forward, self.backward
        return {"name": self.name, "compile_id": self.compile_id, "frame": self.frame,
                "parts": ",".join(self.parts), "graph_breaks": len(self.graph_breaks),
                "recompile": self.is_recompile, "recompile_reasons": "; ".join(self.recompile_reasons),
                "dynamic": self.dynamic, "mode": self.mode,
                "forward_ops": fw.op_count if fw else 0, "forward_kernels": fw.kernel_count if fw else 0,
                "backward_ops": bw.op_count if bw else 0, "backward_kernels": bw.kernel_count if bw else 0}


def _new_events() -> tuple[list, list]:
    from torch._dynamo.utils import counters, guard_failures

    breaks = []
    for reason, count in counters["graph_break"].items():
        seen = STATE.seen_breaks[reason]
        breaks += [reason] * (count - seen if count >= seen else count)  # after dynamo.reset()
        STATE.seen_breaks[reason] = count
    failures = []
    for code, reasons in guard_failures.items():
        seen = STATE.seen_failures.get(code, 0)
        failures += reasons[seen:] if len(reasons) >= seen else reasons
        STATE.seen_failures[code] = len(reasons)
    return breaks, failures


def new_graph(frame: str, compile_id: str, *, mode: str = "default") -> CompiledGraphInfo:
    """A graph Dynamo just handed the backend, with the events since the last one; it joins the
    log when its first part compiles (``add_part``)."""
    with STATE.lock:
        breaks, failures = _new_events()
        return CompiledGraphInfo(name=f"{frame}_{compile_id.replace('/', '_')}", compile_id=compile_id,
                                 frame=frame, graph_breaks=breaks, recompile_reasons=failures, mode=mode)


def add_part(graph: CompiledGraphInfo, info: CompiledPartInfo) -> None:
    """Record a compiled part of ``graph``, logging the graph with its first part. Dynamo may hand
    the backend a frame and then discard that attempt unused (with dynamic shapes it re-traces a
    frame whose compile specialised a size): such a graph never compiles a part and is not shown."""
    with STATE.lock:
        if not graph.parts:
            STATE.graphs.append(graph)
        graph.parts[info.part] = info


def compiled_graphs() -> list[CompiledGraphInfo]:
    """Every graph compiled with ``backend="neuron"`` since the last ``reset()``, oldest first."""
    with STATE.lock:
        return list(STATE.graphs)


def graph_breaks() -> list[str]:
    """All graph-break reasons attributed to compiled graphs since the last ``reset()``."""
    return [b for g in compiled_graphs() for b in g.graph_breaks]


def recompile_reasons() -> list[str]:
    return [r for g in compiled_graphs() for r in g.recompile_reasons]


def reset() -> None:
    """Forget the compiled-graph records (Dynamo's own caches are ``torch._dynamo.reset()``)."""
    with STATE.lock:
        STATE.graphs.clear()
        _new_events()   # events so far belong to no graph we keep
