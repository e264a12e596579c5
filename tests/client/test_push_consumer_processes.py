"""The push consumer against real ``ledgermq namesrv`` / ``ledgermq broker`` processes:
members joining and leaving while messages flow, retries through the broker's schedule, and
a measured consume rate."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.protocol.message import MessageRecord
from tests.client.consumer_cluster import DelayCluster, aio, consumer, wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[DelayCluster]:
    cluster = DelayCluster(tmp_path / "procs")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@aio(80)
async def test_members_join_and_leave_while_messages_flow_nothing_is_lost(procs: DelayCluster) -> None:
    topic = "LiveTopic"
    group = "cg-live"
    seen: list[tuple[str, bytes, int, str]] = []
    failed_once: set[bytes] = set()

    def listener(who: str) -> Any:
        async def on(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                seen.append((who, m.body, m.reconsume_times, m.topic))
            body = msgs[0].body
            if body.endswith(b"7") and body not in failed_once:  # every 10th fails once: the retry path
                failed_once.add(body)
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        return on

    async with Producer("pg-live", procs.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        a = consumer(group, procs.ns_addr, consume_from_where=FIRST)
        b = consumer(group, procs.ns_addr, consume_from_where=FIRST)
        for c, who in ((a, "a"), (b, "b")):
            c.subscribe(topic)
            c.register_listener(listener(who))
        sent: set[bytes] = set()
        try:
            await a.start()
            for i in range(240):
                body = f"live-{i}".encode()
                await producer.send(Message(topic, body))
                sent.add(body)
                if i == 80:
                    await b.start()
                if i == 160:
                    await a.shutdown()
                await asyncio.sleep(0.005)
            bodies = lambda: {body for _, body, _, _ in seen}  # noqa: E731
            await wait_until("every message delivered", lambda: sent <= bodies(), timeout=30)
            await wait_until(
                "every failed message back from the retry topic",
                lambda: all(any(bd == f and r == 1 for _, bd, r, _ in seen) for f in failed_once),
                timeout=20,
            )
        finally:
            await a.shutdown()
            await b.shutdown()
    counts = Counter(body for _, body, _, _ in seen if body in sent)
    assert set(counts) == sent  # at least once, across both rebalances
    assert {who for who, _, _, _ in seen} == {"a", "b"}
    assert {t for _, _, _, t in seen} == {topic}
    retried = {body for _, body, r, _ in seen if r == 1}
    assert retried == failed_once
    # duplicates (other than the retries) only come from queues moving while in flight
    extra = sum(counts.values()) - len(sent) - len(failed_once)
    assert extra <= len(sent) // 4, extra


@aio(80)
async def test_consume_rate(procs: DelayCluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "RateTopic"
    n = 4000
    async with Producer("pg-rate", procs.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        for start in range(0, n, 100):
            await producer.send_batch([Message(topic, f"r-{i}".encode()) for i in range(start, start + 100)])
    rates = {kind: await _measure(procs.ns_addr, topic, n, kind) for kind in ("async", "thread")}
    with capsys.disabled():
        print(
            f"\npush consumer rate, 1 broker process, batch size 1: {rates['async']:.0f} msg/s (async listener), "
            f"{rates['thread']:.0f} msg/s (thread pool listener)"
        )


async def _measure(ns_addr: str, topic: str, n: int, kind: str) -> float:
    """Messages per second a fresh group consumes the topic's backlog at (each exactly once)."""
    got: Counter[bytes] = Counter()

    async def on_async(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
        got.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def on_thread(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
        got.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = consumer(f"cg-rate-{kind}", ns_addr, consume_from_where=FIRST)
    c.subscribe(topic)
    c.register_listener(on_async if kind == "async" else on_thread)
    begin = time.monotonic()
    async with c:
        await wait_until(f"{n} messages ({kind})", lambda: len(got) >= n + 1, timeout=30)
        rate = n / (time.monotonic() - begin)
    assert max(got.values()) == 1
    return rate
