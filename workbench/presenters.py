"""Presenters: the views and files of a data object, registered by the modules that make them.

``Profile`` offers ``show()``, ``save_html()``, ``export_chrome_trace()``, ... , but the modules
that draw and write a profile import ``workbench.profiles``: importing them back would close a
cycle. So each of those modules registers its function here with ``@presenter(name)``, the
package root names the module that provides each presenter (``provide``), and ``present``
imports that module on first use. Data and views both import this registry; neither imports the
other's way back.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

__all__ = ["presenter", "provide", "present"]

_PROVIDERS: dict[str, str] = {}          # presenter name -> module that registers it
_PRESENTERS: dict[str, Callable] = {}


def provide(module: str, *names: str) -> None:
    """Declare that importing ``module`` registers the presenters ``names``."""
    for name in names:
        known = _PROVIDERS.setdefault(name, module)
        if known != module:
            raise ValueError(f"presenter {name!r} is provided by {known}, so {module} cannot provide it too")


def presenter(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated function as the presenter ``name``."""
    def register(fn: Callable) -> Callable:
        if name in _PRESENTERS:
            raise ValueError(f"presenter {name!r} is already registered by {_PRESENTERS[name].__module__}")
        _PRESENTERS[name] = fn
        return fn
    return register


def present(name: str, *args, **kwargs):
    """Call the presenter ``name``, importing the module that provides it if need be."""
    fn = _PRESENTERS.get(name)
    if fn is None:
        module = _PROVIDERS.get(name)
        if module is None:
            raise LookupError(f"no presenter named {name!r}; provided: {', '.join(sorted(_PROVIDERS))}")
        import_module(module)
        fn = _PRESENTERS.get(name)
        if fn is None:
            raise RuntimeError(f"{module} is said to provide the presenter {name!r} but registered none")
    return fn(*args, **kwargs)
