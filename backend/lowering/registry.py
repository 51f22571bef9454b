"""Registry of op lowerings, keyed by aten name (overload dropped), filled by decorator."""
from __future__ import annotations

from collections.abc import Callable

from backend.lowering.builder import OpContext
from backend.sim.flops import base_name
from backend.sim.registry import Registry

__all__ = ["lowering", "namespace_lowering", "lowering_for", "registered_lowerings", "is_free_op"]

LowerFn = Callable[[OpContext], None]
_LOWERINGS = Registry("lowering")
# Op namespaces whose every op one front end lowers (``nki``: kernels written in NKI, whose
# programs come from their source, see ``backend.nki.lowering``); registered from above.
_NAMESPACES = Registry("namespace lowering")


def lowering(*names: str, free: bool = False) -> Callable[[LowerFn], LowerFn]:
    """Register ``fn(ctx)`` for op names; a name registered twice is an error.

    ``free=True`` marks ops that legitimately emit no device work (allocations); any other
    lowering that emits nothing is a bug and ``lower`` raises instead of costing it as free.
    """

    return _LOWERINGS.decorator(*(base_name(n) for n in names), tag="free" if free else None)


def namespace_lowering(namespace: str) -> Callable[[LowerFn], LowerFn]:
    """Register ``fn(ctx)`` for every op of ``namespace`` (``"nki"`` lowers ``nki::*``) that no
    ``@lowering`` names; ``fn`` returns False for an op it does not know (a host fallback)."""
    return _NAMESPACES.decorator(namespace)


def lowering_for(name: str) -> LowerFn | None:
    fn = _LOWERINGS.get(base_name(name))
    if fn is None and "::" in name:
        fn = _NAMESPACES.get(name.split("::", 1)[0])
    return fn


def is_free_op(name: str) -> bool:
    return _LOWERINGS.has_tag(base_name(name), "free")


def registered_lowerings() -> frozenset[str]:
    return _LOWERINGS.keys()
