"""Helpers for the Spark tests: topics with a known layout, messages sent to chosen queues, reads of a result.

Everything talks to real name-server and broker processes through our own client; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, MessageQueue, Producer
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.route import TopicRouteData

WAIT = 20.0


async def _wait_route(admin: AdminClient, topic: str, queues: int, timeout: float = WAIT) -> TopicRouteData:
    deadline = time.monotonic() + timeout
    while True:
        try:
            route = await admin.route(topic)
            if route.queue_datas and all(q.read_queue_nums == queues for q in route.queue_datas):
                return route
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the name server does not route {topic} with {queues} queues after {timeout}s")
        await asyncio.sleep(0.1)


def create_topic(namesrv: str, broker_addrs: Iterable[str], topic: str, queues: int = 2) -> None:
    async def run() -> None:
        async with AdminClient(namesrv) as admin:
            for addr in broker_addrs:
                await admin.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)
            await _wait_route(admin, topic, queues)

    asyncio.run(run())


def body(topic: str, queue_id: int, i: int) -> bytes:
    return f"{topic}|{queue_id}|{i}".encode()


def send(
    namesrv: str,
    topic: str,
    broker: str,
    per_queue: dict[int, int],
    *,
    first: dict[int, int] | None = None,
    tags: str | None = "TagA",
) -> list[tuple[int, int, bytes]]:
    """``per_queue[q]`` messages to queue ``q`` of ``broker``, bodies ``topic|q|i`` (i from ``first[q]``, default 0);
    returns (queueId, queueOffset, body) of each, as the broker acknowledged them."""
    first = first or {}

    async def run() -> list[tuple[int, int, bytes]]:
        out = []
        async with Producer("spark-test-pg", namesrv) as producer:
            for qid, count in sorted(per_queue.items()):
                mq = MessageQueue(topic, broker, qid)
                start = first.get(qid, 0)
                for i in range(start, start + count):
                    msg = Message(topic, body(topic, qid, i), tags=tags, keys=f"k{qid}-{i}", properties={"seq": str(i)})
                    result = await producer.send_to_queue(msg, mq)
                    out.append((qid, result.queue_offset, msg.body))
        return out

    return asyncio.run(run())


def queue_bounds(namesrv: str, broker_addr: str, topic: str) -> dict[int, tuple[int, int]]:
    async def run() -> dict[int, tuple[int, int]]:
        async with AdminClient(namesrv) as admin:
            stats = await admin.topic_stats(broker_addr, topic)
        return {mq.queue_id: (v.min_offset, v.max_offset) for mq, v in stats.items()}

    return asyncio.run(run())


def delete_expired(namesrv: str, broker_addr: str) -> None:
    async def run() -> None:
        async with AdminClient(namesrv) as admin:
            await admin.invoke(broker_addr, RequestCode.DELETE_EXPIRED_COMMITLOG)

    asyncio.run(run())


def rows_of(df: Any) -> list[tuple[str, str, int, int, bytes]]:
    """(topic, broker, queueId, queueOffset, value) of every row, sorted."""
    return sorted(
        (r.topic, r.broker, r.queueId, r.queueOffset, bytes(r.value))
        for r in df.select("topic", "broker", "queueId", "queueOffset", "value").collect()
    )


def committed_offsets(namesrv: str, broker_addr: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` as ``admin consumerProgress`` shows them."""

    async def run() -> dict[int, int]:
        async with AdminClient(namesrv) as admin:
            stats = await admin.consume_stats(broker_addr, group, topic)
        return {mq.queue_id: w.consumer_offset for mq, w in stats.offset_table.items()}

    return asyncio.run(run())
