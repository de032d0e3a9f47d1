"""One small generic registry for metrics, aggregations, filters, models and tasks.

A lookup miss raises `JaxevalError` with near-match suggestions; a lookup never returns None and never
reaches the network.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from jaxeval.errors import JaxevalError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table `name -> T` with loud misses.

    >>> r = Registry[int]("widget")
    >>> r.add("one", 1)
    >>> r.get("one")
    1
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T, *, replace: bool = False) -> None:
        if name in self._items and not replace:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._items[name] = item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form: `@METRICS.register("acc")`."""

        def wrap(item: T) -> T:
            self.add(name, item)
            return item

        return wrap

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise JaxevalError(self.miss_message(name)) from None

    def miss_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._items), n=3, cutoff=0.6)
        msg = f"unknown {self.kind} '{name}'."
        if close:
            msg += f" Did you mean {', '.join(repr(c) for c in close)}?"
        else:
            shown = sorted(self._items)[:20]
            msg += f" Known: {', '.join(shown)}{' ...' if len(self._items) > 20 else ''}."
        return msg

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        return sorted(self._items)
