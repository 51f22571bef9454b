"""Run a function right after a module is first imported (or now, if it already is).

Changes to ``torch.distributed.pipelining`` wait for the script to import it: importing it costs
about a second and ``torch._dynamo``, which ``import workbench`` must not pay for everyone.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable

__all__ = ["after_import"]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``name`` so ``then`` runs after it executes."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)          # once; and the real finders below answer
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then()

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then: Callable[[], None]) -> None:
    if name in sys.modules:
        then()
        return
    if not any(isinstance(f, _AfterImport) and f.name == name and f.then is then for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))
