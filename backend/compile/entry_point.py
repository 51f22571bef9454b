"""How torch finds the ``neuron`` compile backend by name, without importing Dynamo early.

The package declares the backend through the ``torch_dynamo_backends`` entry point
(pyproject.toml), which Dynamo reads on the first ``torch.compile(backend="neuron")``; it then
imports ``ENTRY_POINT_VALUE`` and registers what it names. Nothing is imported before that.

A source checkout whose installed metadata predates the entry point has no such declaration,
so ``declare()`` adds the same entry to Dynamo's backend table the moment Dynamo's registry
module is imported (or at once if it already is). Either way the backend itself is imported
only when a compile first asks for it: ``import workbench`` does not import ``torch._dynamo``.

This module imports only the standard library.
"""
from __future__ import annotations

import importlib.abc
import sys
from importlib.metadata import EntryPoint

__all__ = ["BACKEND_NAME", "ENTRY_POINT_GROUP", "ENTRY_POINT_VALUE", "declare"]

BACKEND_NAME = "neuron"
ENTRY_POINT_GROUP = "torch_dynamo_backends"
ENTRY_POINT_VALUE = "backend.compile.plugin:neuron_backend"
_REGISTRY_MODULE = "torch._dynamo.backends.registry"


def _add_entry(registry) -> None:
    # Dynamo keeps name -> EntryPoint (None once registered directly); an installed entry point
    # or an explicit registration wins.
    registry._BACKENDS.setdefault(
        BACKEND_NAME, EntryPoint(name=BACKEND_NAME, value=ENTRY_POINT_VALUE, group=ENTRY_POINT_GROUP))


class _HookedLoader(importlib.abc.Loader):
    """Runs the real loader, then ``_add_entry`` on the fresh module."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _add_entry(module)

    def __getattr__(self, name):   # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self._loader, name)


class _RegistryImportHook(importlib.abc.MetaPathFinder):
    """One-shot finder: wraps the loader of Dynamo's backend registry, then steps aside."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _REGISTRY_MODULE:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _HookedLoader(spec.loader)
                return spec
        return None


def declare() -> None:
    """Make ``torch.compile(backend="neuron")`` resolvable without importing ``torch._dynamo``.
    Idempotent."""
    registry = sys.modules.get(_REGISTRY_MODULE)
    if registry is not None:
        _add_entry(registry)
    elif not any(isinstance(finder, _RegistryImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegistryImportHook())
