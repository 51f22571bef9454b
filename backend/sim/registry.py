"""A name -> function table filled by decorators; registering a name twice is an error.

Cost formulas, FLOP formulas and op lowerings are all such tables: one place says what a
duplicate means, so two modules cannot silently override each other's entries.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

__all__ = ["Registry"]


class Registry:
    """``table.register(keys, fn)`` or ``@table.decorator(*keys)``; ``table.get(key)``.

    A ``tag`` marks entries with a property the table's users ask about (``has_tag``).
    """

    def __init__(self, what: str):
        self.what = what
        self._entries: dict = {}
        self._tags: dict = {}

    def register(self, keys: Iterable[Hashable], fn: Callable, tag: str | None = None) -> Callable:
        for key in keys:
            if key in self._entries:
                raise ValueError(f"duplicate {self.what} for {key}")
            self._entries[key] = fn
            if tag:
                self._tags.setdefault(tag, set()).add(key)
        return fn

    def decorator(self, *keys: Hashable, tag: str | None = None) -> Callable[[Callable], Callable]:
        return lambda fn: self.register(keys, fn, tag)

    def has_tag(self, key: Hashable, tag: str) -> bool:
        return key in self._tags.get(tag, ())

    def get(self, key: Hashable, default=None):
        return self._entries.get(key, default)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def keys(self) -> frozenset:
        return frozenset(self._entries)
