"""How a held pull is resumed: the long-polling service reads the store once per wake-up
through the processor's one read, and that read is the answer; a filtered pull (tag or
property) keeps waiting through arrivals its filter rejects, as RocketMQ's
PullRequestHoldService checks each arrival. Also the subscription rules the pull answers
by: RocketMQ's tag-expression reading, and broadcast consumers of a group that forbids them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgermq.broker.subscriptions import SubscriptionGroupConfig
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.message import decode_records
from ledgermq.store.results import GetResult
from tests.broker.harness import Harness, running_broker
from tests.broker.test_pull import SUBSCRIPTION, SUSPEND, head, heartbeat_body, pull, until_held
from tests.broker.test_sql92_pull import sql_pull


def count_reads(h: Harness, topic: str) -> list[int]:
    """Wrap the store's get_message: the offsets read for ``topic``, in order."""
    store = h.app.broker.store
    real: Callable[..., GetResult] = store.get_message
    offsets: list[int] = []

    def counting(t: str, queue_id: int, offset: int, *args: Any, **kwargs: Any) -> GetResult:
        if t == topic:
            offsets.append(offset)
        return real(t, queue_id, offset, *args, **kwargs)

    store.get_message = counting  # type: ignore[method-assign]
    return offsets


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_held_property_filtered_pull_reads_the_store_once_per_wakeup(tmp_path: Path) -> None:
    """First read, then one read per wake-up: the read that finds the match is the answer
    (the old processor checked the filter in the hold and then read the same range again)."""

    async def main() -> None:
        async with running_broker(tmp_path, enable_property_filter=True) as h:
            await h.send("R1", b"first", props={"a": "1"})
            await h.dispatched()
            reads = count_reads(h, "R1")
            flags = dict(sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=20_000, timeout=30)
            held = asyncio.create_task(sql_pull(h, "R1", "a = 2", 1, **flags))
            await until_held(h, 1)
            assert reads == [1]
            await h.send("R1", b"no", props={"a": "3"})
            await until(lambda: len(reads) == 2, "the wake-up's read of the rejected arrival")
            await until_held(h, 1)  # waiting again, past it
            assert not held.done()
            await h.send("R1", b"yes", props={"a": "2"})
            resp = await asyncio.wait_for(held, 15)
            assert head(resp)[:2] == (ResponseCode.SUCCESS, 3)
            assert [r.body for r in decode_records(resp.body)] == [b"yes"]
            assert reads == [1, 1, 2], "one read per wake-up, and the last one answered"

    asyncio.run(main())


def test_a_held_tag_filtered_pull_waits_through_other_tags(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await h.send("R2", b"first", props={"TAGS": "A"})
            await h.dispatched()
            reads = count_reads(h, "R2")
            flags = dict(sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=20_000, timeout=30)
            held = asyncio.create_task(pull(h, "R2", 0, 1, subscription="A", **flags))
            await until_held(h, 1)
            await h.send("R2", b"other", props={"TAGS": "B"})
            await until(lambda: len(reads) == 2, "the wake-up's read of the other tag")
            await until_held(h, 1)
            assert not held.done(), "an arrival of another tag does not answer the pull"
            await h.send("R2", b"mine", props={"TAGS": "A"})
            resp = await asyncio.wait_for(held, 15)
            assert head(resp)[:2] == (ResponseCode.SUCCESS, 3)
            assert [r.body for r in decode_records(resp.body)] == [b"mine"]
            assert reads == [1, 1, 2]

    asyncio.run(main())


def test_subscriptions_are_read_as_rocketmq_reads_them(tmp_path: Path) -> None:
    """FilterAPI.buildSubscriptionData: blanks around tags and repeated tags do not matter;
    an expression of separators only is refused; a text naming no tag (not "*") matches
    nothing; " * " is the tag "*", not everything."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            for n, tag in enumerate(["A", "B", "*", "A"]):
                await h.send("R3", b"%d" % n, props={"TAGS": tag})
            await h.dispatched()

            async def tags_of(expression: str) -> list[str | None]:
                resp = await pull(h, "R3", subscription=expression)
                assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), resp
                return [r.tags for r in decode_records(resp.body)]

            assert await tags_of(" A ||A|| ") == ["A", "A"]
            assert await tags_of("A || B") == ["A", "B", "A"]
            assert await tags_of("*") == ["A", "B", "*", "A"]
            assert await tags_of(" * ") == ["*"]
            assert await tags_of(" ") == []
            resp = await pull(h, "R3", subscription="||")
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "split" in (resp.remark or ""), resp

    asyncio.run(main())


def test_a_group_that_forbids_broadcasting_refuses_broadcast_pulls(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await h.send("R4", b"x")
            await h.dispatched()
            h.app.broker.subscriptions.update(SubscriptionGroupConfig("bg", consume_broadcast_enable=False))
            doc = fastjson.loads(heartbeat_body("10.0.0.9@b", "bg", {"R4": ("*", 1)}))
            doc["consumerDataSet"][0]["messageModel"] = "BROADCASTING"
            assert (await h.call(RequestCode.HEART_BEAT, {}, fastjson.dumps(doc))).code == ResponseCode.SUCCESS
            java = dict(consumerGroup="bg", sysFlag=0, subscription=None, subVersion=1)
            resp = await pull(h, "R4", **java)
            assert resp.code == ResponseCode.NO_PERMISSION and "broadcast" in (resp.remark or ""), resp
            doc["consumerDataSet"][0]["messageModel"] = "CLUSTERING"
            assert (await h.call(RequestCode.HEART_BEAT, {}, fastjson.dumps(doc))).code == ResponseCode.SUCCESS
            assert (await pull(h, "R4", **java)).code == ResponseCode.SUCCESS

    asyncio.run(main())
