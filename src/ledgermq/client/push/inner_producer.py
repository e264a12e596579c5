"""The producer a push consumer re-sends failed messages through (Java's
``CLIENT_INNER_PRODUCER``): the fallback when the broker refuses a CONSUMER_SEND_MSG_BACK,
and the orderly consumer's way to the dead-letter queue.

Most consumers never fail a message, so the producer starts on first use. It is shared by
the consumers of one client instance (one producer group per instance, as in Java) and
shut down when the last of them lets go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.client.producer.producer import Producer

__all__ = ["CLIENT_INNER_PRODUCER", "InnerProducerRef"]

CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"


class _InnerProducers:
    """One producer per client instance, counted by the consumers holding it."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[Producer, int]] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # one per instance (so per event loop)

    async def acquire(self, instance: ClientInstance, namesrv_addrs: Sequence[str]) -> Producer:
        key = id(instance)
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._table.get(key)
            if entry is not None:
                self._table[key] = (entry[0], entry[1] + 1)
                return entry[0]
            producer = Producer(
                CLIENT_INNER_PRODUCER,
                list(namesrv_addrs),
                client_ip=instance.client_ip,
                instance_name=instance.instance_name,
                api_timeout=instance.api_timeout,
                credentials=instance.credentials,
            )
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

    def __init__(self) -> None:
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()

    async def get(self, instance: ClientInstance) -> Producer:
        if self._producer is None:
            async with self._lock:
                if self._producer is None:
                    self._producer = await _INNER_PRODUCERS.acquire(instance, instance.namesrv_addrs)
        return self._producer

    async def release(self, instance: ClientInstance) -> None:
        """Give the reference back, if one was taken."""
        if self._producer is not None:
            self._producer = None
            await _INNER_PRODUCERS.release(instance)
