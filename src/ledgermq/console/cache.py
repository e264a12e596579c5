"""Answers shared between the pages open at one moment: a key asked for again within
``ttl_s`` gets the same answer, and a key asked for while its first request is still out
waits for that request instead of sending another. With ten tabs on the cluster page the
brokers answer once per refresh, not ten times. Failures are shared with the callers
waiting at that moment but never kept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from ledgermq.clock import SYSTEM_CLOCK

T = TypeVar("T")


class SharedAnswers:
    def __init__(
        self, ttl_s: float, clock: Callable[[], float] = SYSTEM_CLOCK.monotonic, max_entries: int = 4096
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, asyncio.Future[Any]]] = {}

    async def get(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
        now = self.clock()
        entry = self._entries.get(key)
        if entry is not None and (not entry[1].done() or now < entry[0]):
            return await asyncio.shield(entry[1])
        if len(self._entries) >= self.max_entries:
            self._evict(now)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._entries[key] = (now + self.ttl_s, future)
        try:
            value = await make()
        except BaseException as exc:
            self._entries.pop(key, None)
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: an error no other caller waited for is not "never retrieved"
            raise
        future.set_result(value)
        self._entries[key] = (self.clock() + self.ttl_s, future)
        return value

    def forget(self) -> None:
        """After a change (a topic created, an offset reset): the next page asks afresh."""
        self._entries = {k: e for k, e in self._entries.items() if not e[1].done()}

    def _evict(self, now: float) -> None:
        self._entries = {k: e for k, e in self._entries.items() if not e[1].done() or now < e[0]}
        while len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))
