"""The source's only contact with brokers and name servers: a small synchronous facade over
the asyncio client (``ClientInstance`` and its ``PullAPI``), with an event loop of its own.

Spark calls the source from plain threads: planning on the driver (a long-lived Python
process per streaming source), ``read()`` and ``write()`` in executor Python workers. A
``BrokerSession`` owns an event loop (uvloop when installed) and a started client;
``session.run(coro)`` runs one step. Nothing here is pickled: readers create a session
lazily and drop it from their pickled state.

Reads go wherever the client sends them: the master of the queue's broker group, or a
slave of the group while the master is gone from the route (the client decides).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ledgermq.aio.loops import close_loop, new_event_loop
from ledgermq.client.errors import MQBrokerError, MQClientError, NoRouteError
from ledgermq.client.instance.client_instance import ClientInstance, InstanceSettings
from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.client.instance.topics import list_user_topics
from ledgermq.client.message import MessageQueue
from ledgermq.client.tls import TlsOptions
from ledgermq.spark.offsets import QueueId

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Pulled:
    """One pull's answer, undecoded: ``raw`` is stored records back to back; ``status``
    is the client's (``PullStatus``)."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    raw: bytes = field(repr=False)
    from_slave: bool
    addr: str


class BrokerUnavailableError(MQClientError):
    """No broker of the queue's group answered (connection refused, timeout, no route)."""


def _mq(q: QueueId) -> MessageQueue:
    return MessageQueue(q.topic, q.broker, q.queue_id)


class BrokerSession:
    """``with BrokerSession(addrs) as s: s.run(s.max_offset(q))``."""

    def __init__(self, namesrv: Sequence[str], *, api_timeout_ms: int = 3000, tls: TlsOptions | None = None) -> None:
        self.namesrv = list(namesrv)
        self.api_timeout = api_timeout_ms / 1000
        self.tls = tls
        self._loop: asyncio.AbstractEventLoop | None = new_event_loop()
        self._client: ClientInstance | None = None

    def __enter__(self) -> BrokerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, coro: Awaitable[T]) -> T:
        if self._loop is None:
            raise MQClientError("the broker session is closed")
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if self._client is not None:
                loop.run_until_complete(self._client.shutdown())
        except Exception as exc:  # closing must not hide the error that got us here
            log.debug("broker session shutdown: %s", exc)
        finally:
            self._client = None
            close_loop(loop)

    async def client(self) -> ClientInstance:
        if self._client is None:
            client = ClientInstance(
                InstanceSettings(
                    namesrv_addrs=self.namesrv,
                    api_timeout=self.api_timeout,
                    instance_name=f"spark-{id(self)}",
                    use_tls=self.tls is not None,
                    tls=self.tls,
                )
            )
            await client.start()
            self._client = client
        return self._client

    # -- name servers --------------------------------------------------------------------
    async def queues(self, topic: str) -> list[QueueId]:
        """The topic's readable queues across its broker groups (fresh from the name server);
        [] when the name servers know no route of it."""
        client = await self.client()
        try:
            mqs = await client.routes.find_subscribe_queues(topic, refresh=True)
        except NoRouteError:
            return []
        except MQClientError as exc:
            raise BrokerUnavailableError(f"no route of topic {topic}: {exc}") from exc
        return sorted(QueueId(m.topic, m.broker_name, m.queue_id) for m in mqs)

    async def topics(self) -> list[str]:
        """Every user topic the name servers know (system, retry, DLQ, cluster and broker
        names left out), sorted."""
        return await list_user_topics((await self.client()).namesrv)

    # -- queue offsets -------------------------------------------------------------------
    async def min_offset(self, q: QueueId) -> int:
        return await (await self.client()).pull_api.min_offset(_mq(q))

    async def max_offset(self, q: QueueId) -> int:
        return await (await self.client()).pull_api.max_offset(_mq(q))

    async def search_offset(self, q: QueueId, timestamp_ms: int) -> int:
        return await (await self.client()).pull_api.search_offset(_mq(q), timestamp_ms)

    async def bounds(self, queues: Sequence[QueueId]) -> dict[QueueId, tuple[int, int]]:
        """(min, max) of every queue, asked concurrently."""

        async def one(q: QueueId) -> tuple[int, int]:
            low, high = await asyncio.gather(self.min_offset(q), self.max_offset(q))
            return low, high

        answers = await asyncio.gather(*(one(q) for q in queues))
        return dict(zip(queues, answers, strict=True))

    # -- pulls and commits ---------------------------------------------------------------
    async def pull(
        self, q: QueueId, group: str, offset: int, max_nums: int, *, expression: str = "*", timeout: float | None = None
    ) -> Pulled:
        api = (await self.client()).pull_api
        result = await api.pull(_mq(q), group, offset, max_nums, expression=expression, timeout=timeout, decode=False)
        return Pulled(
            result.status,
            result.next_begin_offset,
            result.min_offset,
            result.max_offset,
            result.raw,
            result.from_slave,
            result.broker_addr,
        )

    async def commit(self, q: QueueId, group: str, offset: int) -> None:
        await (await self.client()).pull_api.update_consumer_offset(_mq(q), group, offset)

    async def committed(self, q: QueueId, group: str) -> int | None:
        return await (await self.client()).pull_api.query_consumer_offset(_mq(q), group)


__all__ = ["BrokerSession", "BrokerUnavailableError", "MQBrokerError", "PullStatus", "Pulled"]
