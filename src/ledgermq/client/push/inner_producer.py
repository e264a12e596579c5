"""The producer a push consumer re-sends failed messages through (Java's
``CLIENT_INNER_PRODUCER``): the fallback when the broker refuses a CONSUMER_SEND_MSG_BACK,
and the orderly consumer's way to the dead-letter queue.

Most consumers never fail a message, so the producer starts on first use. It is shared by
the consumers of one client instance (one producer group per instance, as in Java) and
shut down when the last of them lets go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.client.message import Message, SendResult

__all__ = ["CLIENT_INNER_PRODUCER", "InnerProducer", "InnerProducerRef", "MakeInnerProducer"]

CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"


class InnerProducer(Protocol):
    """What the consumers need of a producer: sending a message back, and a lifecycle."""

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def send(self, msg: Message, *, timeout: float | None = None) -> SendResult: ...


# Given by the push consumer facade, which builds a producer of group CLIENT_INNER_PRODUCER
# on the instance's settings: the facade knows the producer, its parts need not.
MakeInnerProducer = Callable[[ClientInstance], InnerProducer]


class _InnerProducers:
    """One producer per client instance, counted by the consumers holding it."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[InnerProducer, int]] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # one per instance (so per event loop)

    async def acquire(self, instance: ClientInstance, make: MakeInnerProducer) -> InnerProducer:
        key = id(instance)
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._table.get(key)
            if entry is not None:
                self._table[key] = (entry[0], entry[1] + 1)
                return entry[0]
            producer = make(instance)
            await producer.start()
            self._table[key] = (producer, 1)
            return producer

    async def release(self, instance: ClientInstance) -> None:
        key = id(instance)
        entry = self._table.get(key)
        if entry is None:
            return
        if entry[1] > 1:
            self._table[key] = (entry[0], entry[1] - 1)
            return
        del self._table[key]
        self._locks.pop(key, None)
        await entry[0].shutdown()


_INNER_PRODUCERS = _InnerProducers()


class InnerProducerRef:
    """One consumer's hold on its instance's inner producer: at most one reference however
    many failed batches ask at once, so that releasing it once at shutdown lets the
    producer (and with it the client instance) stop."""

    def __init__(self, make: MakeInnerProducer) -> None:
        self._make = make
        self._producer: InnerProducer | None = None
        self._lock = asyncio.Lock()

    async def get(self, instance: ClientInstance) -> InnerProducer:
        if self._producer is None:
            async with self._lock:
                if self._producer is None:
                    self._producer = await _INNER_PRODUCERS.acquire(instance, self._make)
        return self._producer

    async def release(self, instance: ClientInstance) -> None:
        """Give the reference back, if one was taken."""
        if self._producer is not None:
            self._producer = None
            await _INNER_PRODUCERS.release(instance)
