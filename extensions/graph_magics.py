"""``%neuron_graphs``: what ``torch.compile(backend="neuron")`` compiled in this session."""
from __future__ import annotations

import html

import pandas as pd
from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from extensions.common import parse, show_text, usage_error
from workbench.figures import display_figure, graph_figure
from workbench.graphs import expand_graphs
from workbench.session import compiled_graphs

__all__ = ["GraphMagics"]

_NONE_YET = ("No graphs compiled yet in this session: call a model wrapped in "
             "torch.compile(model, backend='neuron'), or profile a cell with %%neuron_profile --compile.")


def _record(graph) -> dict:
    return graph.to_record() if hasattr(graph, "to_record") else {"name": getattr(graph, "name", str(graph))}


@magics_class
class GraphMagics(Magics):
    """``%neuron_graphs [GRAPH] [-o]``."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("graph", nargs="?",
                              help="index (-1: the latest) or name of one graph: draw its fusion groups, show its FX code")
    @magic_arguments.argument("-o", dest="output", action="store_true",
                              help="return the graph list (or the chosen graph)")
    @line_magic
    def neuron_graphs(self, line: str = ""):
        """List the graphs the ``neuron`` compile backend compiled in this session, or show one.

        Without an argument: one row per Dynamo graph (frame, parts, how many ops eager mode would
        launch vs kernels after fusion, graph breaks, recompiles). With an index or a name: each
        AOTAutograd part (forward, backward or inference) drawn as a DAG coloured by fusion group,
        with its FX code.
        """
        args = parse(self.neuron_graphs, line)
        graphs = compiled_graphs()
        if args.graph is None:
            if graphs:
                display(pd.DataFrame.from_records([_record(g) for g in graphs]))
            else:
                show_text(_NONE_YET, f"<p>{html.escape(_NONE_YET)}</p>")
            return graphs if args.output else None
        graph = self._choose(graphs, args.graph)
        for part in expand_graphs([graph]):
            display_figure(graph_figure(part))
            show_text(f"FX code of {part.name}:\n{part.fx_text}",
                      f"<details><summary>FX code of {html.escape(part.name)}</summary>"
                      f"<pre>{html.escape(part.fx_text)}</pre></details>")
        return graph if args.output else None

    def _choose(self, graphs, key: str):
        try:
            index = int(key)
        except ValueError:
            named = [g for g in graphs if getattr(g, "name", None) == key]
            if not named:
                names = ", ".join(str(getattr(g, "name", "?")) for g in graphs) or "none yet"
                raise usage_error(self.neuron_graphs, f"no compiled graph named {key!r} (graphs: {names})") from None
            return named[0]
        if not -len(graphs) <= index < len(graphs):
            raise usage_error(self.neuron_graphs, f"graph index {index} out of range: {len(graphs)} compiled")
        return graphs[index]
