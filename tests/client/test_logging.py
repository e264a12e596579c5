"""The client's logging policy (docs/client.md, "Logging"): a healthy run logs nothing at
WARNING or above, and a condition that repeats is logged at most once per interval."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.util.ratelog import RateLimitedLog
from tests.client.cluster import running
from tests.client.consumer_cluster import Collector, aio, consumer, send_many

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def client_complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("ledgermq.client") and r.levelno >= logging.WARNING
    ]


@aio(90)
async def test_a_healthy_start_up_and_run_logs_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The consumer starts first, on a topic nobody has created and a group the broker does
    not know: its first route lookups, offset queries and pulls fail as expected until the
    producer's first send creates the topic and the heartbeat registers the group. Then two
    consumers of the group share the queues (rebalance churn), and every message arrives."""
    caplog.set_level(logging.DEBUG, logger="ledgermq")
    topic = "QuietTopic"
    async with running(tmp_path) as cl:
        col = Collector()
        a = consumer("cg-quiet", cl.ns_addr, consume_from_where=FIRST)
        a.subscribe(topic)
        a.register_listener(col.listener("a"))
        await a.start()
        b = consumer("cg-quiet", cl.ns_addr, consume_from_where=FIRST)
        b.subscribe(topic)
        b.register_listener(col.listener("b", ConsumeConcurrentlyStatus.CONSUME_SUCCESS))
        try:
            async with Producer("pg-quiet", cl.ns_addr) as producer:
                first = await send_many(producer, topic, 20, prefix="a")  # auto-creates the topic
                await col.wait_ids(first)
                await b.start()  # rebalance: the queues are split between a and b
                second = await send_many(producer, topic, 20, prefix="b")
                await col.wait_ids(second)
        finally:
            await b.shutdown()
            await a.shutdown()
    complaints = client_complaints(caplog)
    assert not complaints, "\n".join(complaints)


def test_a_repeated_failure_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limiter = RateLimitedLog(interval=30.0, clock=lambda: now[0])
    logger = logging.getLogger("ledgermq.client.test")
    caplog.set_level(logging.DEBUG, logger="ledgermq.client.test")
    for _ in range(50):  # a failure every 0.2 s for 10 s
        limiter.log(logger, logging.WARNING, ("ns", "a"), "name server %s unreachable", "a")
        now[0] += 0.2
    limiter.log(logger, logging.WARNING, ("ns", "b"), "name server %s unreachable", "b")  # another key
    now[0] += 30.0
    limiter.log(logger, logging.WARNING, ("ns", "a"), "name server %s unreachable", "a")
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert messages == [
        "name server a unreachable",
        "name server b unreachable",
        "name server a unreachable (49 similar messages suppressed)",
    ]
    limiter.reset(("ns", "a"))  # the condition cleared: the next one is news again
    assert limiter.log(logger, logging.WARNING, ("ns", "a"), "again")


def test_a_transient_condition_is_debug_until_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = RateLimitedLog(interval=60.0, clock=lambda: now[0])
    logger = logging.getLogger("ledgermq.client.test")
    caplog.set_level(logging.DEBUG, logger="ledgermq.client.test")
    key = ("no-route", "g", "T")
    for _ in range(10):  # 10 s of a topic being created: DEBUG only
        assert not limiter.persisting(logger, logging.WARNING, key, "no route of %s", "T", grace=30.0)
        now[0] += 1.0
    limiter.reset(key)  # the route arrived
    now[0] += 5.0
    for _ in range(40):  # then a topic that never comes: one warning after the grace, not forty
        limiter.persisting(logger, logging.WARNING, key, "no route of %s", "T", grace=30.0)
        now[0] += 1.0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["no route of T (for 30s)"]
    now[0] += 100.0  # not seen for longer than the grace: it cleared; a new occurrence is DEBUG again
    assert not limiter.persisting(logger, logging.WARNING, key, "no route of %s", "T", grace=30.0)
