"""Reversible changes to other modules: every patch remembers what it replaced.

CUDA emulation changes torch at run time (``torch.cuda`` functions, ``Tensor.to``, dispatch
registrations, ...), and ``workbench profile --compile`` routes ``nn.Module.__call__`` through
``torch.compile``. Each change goes through a :class:`Patcher`, which undoes them in reverse
order, so switching the change off leaves torch exactly as it found it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping, MutableSet

__all__ = ["Patcher"]

log = logging.getLogger(__name__)
_MISSING = object()


class Patcher:
    """Apply attribute / mapping / set changes and undo callbacks; ``restore()`` undoes all."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []

    def __len__(self) -> int:
        return len(self._undo)

    @property
    def descriptions(self) -> list[str]:
        """What is patched now, oldest first (for logs and error messages)."""
        return [what for what, _ in self._undo]

    def setattr(self, owner, name: str, value) -> None:
        """``owner.name = value``; restores the owner's own entry (or its absence).

        Reads ``vars(owner)`` rather than ``getattr``: a class attribute inherited from a base
        must come back as "not defined here", and a staticmethod must come back wrapped.
        """
        old = vars(owner).get(name, _MISSING)
        setattr(owner, name, value)

        def undo() -> None:
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)

        self._undo.append((f"{getattr(owner, '__name__', type(owner).__name__)}.{name}", undo))

    def setitem(self, mapping: MutableMapping, key, value, label: str = "mapping") -> None:
        old = mapping.get(key, _MISSING)
        mapping[key] = value

        def undo() -> None:
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        self._undo.append((f"{label}[{key!r}]", undo))

    def add(self, members: MutableSet, member, label: str = "set") -> None:
        if member in members:
            return
        members.add(member)
        self._undo.append((f"{label} += {member!r}", lambda: members.discard(member)))

    def on_restore(self, what: str, undo: Callable[[], None]) -> None:
        """Run ``undo()`` on restore, in reverse order with the other patches."""
        self._undo.append((what, undo))

    def restore(self) -> None:
        """Undo everything, newest first; keeps going past a failing undo and re-raises it."""
        first_error = None
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:  # keep restoring the rest; report the first failure
                log.error("could not undo %s: %s", what, exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
