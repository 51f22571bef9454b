"""Replacing a PyTorch function with a wrapper of it, once per process."""
from __future__ import annotations

__all__ = ["replace_once"]

_MARK = "_workbench_wrapper"


def replace_once(owner, name: str, wrap) -> None:
    """``owner.name = wrap(owner.name)`` (a class's staticmethod stays one), unless a wrapper
    from here already sits there: registering twice must not wrap twice."""
    raw = vars(owner).get(name, getattr(owner, name))
    static = isinstance(raw, staticmethod)
    function = raw.__func__ if static else raw
    if getattr(function, _MARK, False):
        return
    wrapper = wrap(function)
    setattr(wrapper, _MARK, True)
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)
