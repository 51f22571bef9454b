"""The compile layer's process-wide state in one object, ``STATE``.

The log of compiled graphs (and how much of Dynamo's graph-break and guard-failure reports it
has already attributed), the recording suspensions of the frames each thread is compiling, and
whether Dynamo's trace rules know the workbench's packages. ``reset()`` clears the log and what
it has attributed (pair it with ``torch._dynamo.reset()``, which clears Dynamo's reports); the
trace rules cannot be removed from Dynamo and open suspensions belong to compiles in flight,
so both stay.
"""
from __future__ import annotations

import threading
from collections import Counter

__all__ = ["CompileState", "STATE"]


class CompileState:
    __slots__ = ("lock", "graphs", "seen_breaks", "seen_failures", "tracing", "trace_rules_added")

    def __init__(self) -> None:
        self.lock = threading.Lock()          # guards graphs and the seen_* counts
        self.graphs: list = []                # CompiledGraphInfo, oldest first
        # What Dynamo had reported when the log last looked, so each graph gets only its own events.
        self.seen_breaks: Counter = Counter()
        self.seen_failures: dict = {}
        self.tracing = threading.local()      # per thread: .stack of suspensions, one per frame compiling
        self.trace_rules_added = False        # Dynamo skips backend.* when tracing (backend.prepare_dynamo)

    def reset(self) -> None:
        """Forget the compiled graphs and the Dynamo reports seen (tests)."""
        with self.lock:
            self.graphs.clear()
            self.seen_breaks.clear()
            self.seen_failures.clear()


STATE = CompileState()
