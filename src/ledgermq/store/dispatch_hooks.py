"""Dispatch hooks that only care about records carrying one property.

A hook is called with every dispatched record's ``DispatchRequest``. Most hooks look for
one property that nearly no record has (the timer service listens for its master's
delivery progress); a ``PropertyHook`` says which, so dispatch can skip the request,
and the decode of the properties text it needs, for every record whose raw properties do
not contain that name (store/window_dispatch.py). Called with a request, it applies the
same test itself, so every dispatch path gives it the same records.
"""

from __future__ import annotations

from collections.abc import Callable

from ledgermq.store.dispatch import DispatchRequest

DispatchHook = Callable[[DispatchRequest], None]


class PropertyHook:
    """``hook``, for the records whose properties text contains ``name`` (anywhere: a
    superset of the records that hold the property, which the hook checks itself)."""

    __slots__ = ("hook", "name", "raw_name")

    def __init__(self, hook: DispatchHook, name: str) -> None:
        if not name:
            raise ValueError("a property hook needs a property name")
        self.hook = hook
        self.name = name
        self.raw_name = name.encode()

    def __call__(self, req: DispatchRequest) -> None:
        if self.name in req.properties:
            self.hook(req)

    def __repr__(self) -> str:
        return f"PropertyHook({self.hook!r}, {self.name!r})"
