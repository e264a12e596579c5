"""PULL_MESSAGE over the wire: status mapping, subscriptions, tag filtering, long polling, commit offsets.

Expected behaviour: J broker/.../processor/PullMessageProcessor.java (4.9.7) and
DefaultMessageStore.getMessage, as summarised in docs/formats.md §3.2.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from tests.broker.harness import Harness, running_broker
from tests.broker.test_send import assert_wire_response, cpp_header, frame, raw_call

COMMIT_OFFSET, SUSPEND, SUBSCRIPTION = 1, 2, 4
PULL_HEADER_KEYS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")


def pull_header(topic: str, queue_id: int = 0, offset: int = 0, **over: Any) -> dict[str, Any]:
    header: dict[str, Any] = {
        "consumerGroup": "cg",
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": SUBSCRIPTION,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    header.update(over)
    return {k: v for k, v in header.items() if v is not None}


async def pull(
    harness: Harness, topic: str, queue_id: int = 0, offset: int = 0, /, timeout: float = 5.0, **over: Any
) -> RemotingCommand:
    return await harness.call(RequestCode.PULL_MESSAGE, pull_header(topic, queue_id, offset, **over), timeout=timeout)


def head(resp: RemotingCommand) -> tuple[int, int, int, int]:
    """(code, nextBeginOffset, minOffset, maxOffset), checking every header field is present."""
    missing = [k for k in PULL_HEADER_KEYS if k not in resp.ext_fields]
    assert not missing, f"pull response lacks {missing}: {resp}"
    ext = resp.ext_fields
    return resp.code, int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"])


async def fill(h: Harness, topic: str, tags: list[str], queue_id: int = 0) -> None:
    for n, tag in enumerate(tags):
        await h.send(topic, b"%s-%d" % (tag.encode(), n), queue_id=queue_id, props={"TAGS": tag})
    await h.dispatched()


async def create_topic(h: Harness, topic: str, queues: int = 4) -> None:
    ext = {
        "topic": topic,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    assert (await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)).code == ResponseCode.SUCCESS


def heartbeat_body(client_id: str, group: str, subs: dict[str, tuple[str, int]]) -> bytes:
    """A Java-style heartbeat with one consumer group subscribed to ``{topic: (expression, subVersion)}``."""
    subscriptions = []
    for topic, (expr, version) in subs.items():
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
        subscriptions.append(
            {
                "classFilterMode": False,
                "codeSet": [],
                "expressionType": "TAG",
                "subString": expr,
                "subVersion": version,
                "tagsSet": tags,
                "topic": topic,
            }
        )
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": subscriptions,
        "unitMode": False,
    }
    return fastjson.dumps({"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []})


# -- status mapping ------------------------------------------------------------------------
def test_found_returns_records_and_next_offset(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "PT", ["TagA"] * 5)
            resp = await pull(h, "PT")
            assert head(resp) == (ResponseCode.SUCCESS, 5, 0, 5)
            assert resp.ext_fields["suggestWhichBrokerId"] == "0"
            records = decode_records(resp.body)
            assert [r.body for r in records] == [b"TagA-%d" % n for n in range(5)]
            assert [(r.topic, r.queue_id, r.queue_offset) for r in records] == [("PT", 0, n) for n in range(5)]

            resp = await pull(h, "PT", 0, 1, maxMsgNums=2)
            assert head(resp) == (ResponseCode.SUCCESS, 3, 0, 5)
            assert [r.queue_offset for r in decode_records(resp.body)] == [1, 2]

            resp = await pull(h, "PT", 0, 4)
            assert head(resp) == (ResponseCode.SUCCESS, 5, 0, 5)
            assert len(decode_records(resp.body)) == 1

    asyncio.run(main())


def test_empty_and_missing_queues(tmp_path: Path) -> None:
    """NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE: 19 when the request offset is 0, else 21; next 0."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await create_topic(h, "Empty")
            await fill(h, "Empty", ["TagA"], queue_id=0)
            for queue_id in (1, 3):  # never written: no consume queue at all
                assert head(await pull(h, "Empty", queue_id, 0)) == (ResponseCode.PULL_NOT_FOUND, 0, 0, 0)
                assert head(await pull(h, "Empty", queue_id, 7)) == (ResponseCode.PULL_OFFSET_MOVED, 0, 0, 0)
            resp = await pull(h, "Empty", 1, 7)
            assert resp.body == b""

    asyncio.run(main())


def test_offsets_at_and_past_the_end(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "End", ["TagA"] * 3)
            # == max: OFFSET_OVERFLOW_ONE -> 19, next = the request offset.
            resp = await pull(h, "End", 0, 3)
            assert head(resp) == (ResponseCode.PULL_NOT_FOUND, 3, 0, 3)
            assert resp.body == b""
            # > max: OFFSET_OVERFLOW_BADLY -> 21, next = max.
            for offset in (4, 1000, 2**62):
                resp = await pull(h, "End", 0, offset)
                assert head(resp) == (ResponseCode.PULL_OFFSET_MOVED, 3, 0, 3), offset
                assert resp.body == b""

    asyncio.run(main())


def test_no_tag_match_is_retry_immediately_with_advanced_offset(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "Tags", ["TagA", "TagB", "TagA"])
            resp = await pull(h, "Tags", subscription="TagZ")
            assert head(resp) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 3, 0, 3)
            assert resp.body == b""
            resp = await pull(h, "Tags", 0, 1, subscription="TagA", maxMsgNums=1)
            # Offset 1 is TagB (skipped), offset 2 is TagA: found, next = 3.
            assert head(resp) == (ResponseCode.SUCCESS, 3, 0, 3)
            assert [r.queue_offset for r in decode_records(resp.body)] == [2]

    asyncio.run(main())


def test_tag_expression_filters_on_the_broker(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            tags = ["TagA", "TagB", "TagC", "TagA", "TagC", "TagB"]
            await fill(h, "Filter", tags)
            for expr, wanted in (
                ("TagA || TagB", {"TagA", "TagB"}),
                ("TagC", {"TagC"}),
                (" TagB ||TagC ", {"TagB", "TagC"}),
                ("*", set(tags)),
            ):
                resp = await pull(h, "Filter", subscription=expr)
                assert head(resp) == (ResponseCode.SUCCESS, 6, 0, 6), expr
                got = [(r.queue_offset, r.tags) for r in decode_records(resp.body)]
                assert got == [(n, t) for n, t in enumerate(tags) if t in wanted], expr

    asyncio.run(main())


def test_response_header_fields_are_strings_on_the_wire(tmp_path: Path) -> None:
    """A C++-style pull (queueId, maxMsgNums, sysFlag as JSON numbers, no expressionType)."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "Wire", ["TagA"] * 2)
            for offset, code in ((0, ResponseCode.SUCCESS), (2, ResponseCode.PULL_NOT_FOUND), (9, 21)):
                ext = pull_header("Wire", 0, offset, sysFlag=SUBSCRIPTION, queueOffset=str(offset))
                header, body = await raw_call(h.app.port, frame(cpp_header(RequestCode.PULL_MESSAGE, ext, 77)))
                assert header["code"] == code, header
                out = assert_wire_response(header, 77, PULL_HEADER_KEYS)
                assert out["suggestWhichBrokerId"] == "0" and out["maxOffset"] == "2"
                assert bool(body) == (code == ResponseCode.SUCCESS)

    asyncio.run(main())


# -- errors ------------------------------------------------------------------------------------
def test_unknown_topic_and_bad_queue_ids(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            resp = await pull(h, "NoSuchTopic")
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark, resp
            await create_topic(h, "Four", 4)
            for queue_id in (4, 100, -1):
                resp = await pull(h, "Four", queue_id)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (queue_id, resp)
                assert resp.remark and f"queueId[{queue_id}]" in resp.remark

    asyncio.run(main())


# -- subscriptions: SUBSCRIPTION flag (C++) vs heartbeat (Java) ---------------------------------
def test_java_pull_without_subscription_flag_needs_a_heartbeat(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "JT", ["TagA", "TagB", "TagA"])
            java = dict(sysFlag=SUSPEND, subscription=None, subVersion=100)
            # No heartbeat, no SUBSCRIPTION flag: SUBSCRIPTION_NOT_EXIST.
            resp = await pull(h, "JT", **java)
            assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST and resp.remark, resp

            # A heartbeat for another topic of the group: still 24.
            body = heartbeat_body("10.0.0.5@java", "cg", {"Other": ("*", 100)})
            assert (await h.call(RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
            assert (await pull(h, "JT", **java)).code == ResponseCode.SUBSCRIPTION_NOT_EXIST

            # The group subscribes JT with TagA at version 100: the stored subscription filters.
            body = heartbeat_body("10.0.0.5@java", "cg", {"JT": ("TagA", 100)})
            assert (await h.call(RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
            resp = await pull(h, "JT", **java)
            assert head(resp) == (ResponseCode.SUCCESS, 3, 0, 3)
            assert [r.tags for r in decode_records(resp.body)] == ["TagA", "TagA"]
            # An older request version is fine; a newer one is SUBSCRIPTION_NOT_LATEST.
            assert (await pull(h, "JT", **{**java, "subVersion": 99})).code == ResponseCode.SUCCESS
            resp = await pull(h, "JT", **{**java, "subVersion": 101})
            assert resp.code == ResponseCode.SUBSCRIPTION_NOT_LATEST and resp.remark, resp

            # The C++ way (SUBSCRIPTION flag) ignores the stored subscription and version.
            resp = await pull(h, "JT", sysFlag=SUBSCRIPTION, subscription="TagB", subVersion=10**12)
            assert [r.tags for r in decode_records(resp.body)] == ["TagB"]

    asyncio.run(main())


# -- long polling ---------------------------------------------------------------------------------
async def until_held(h: Harness, count: int, timeout: float = 10.0) -> None:
    """Poll (bounded) until the broker holds ``count`` suspended pulls."""
    deadline = time.monotonic() + timeout
    while h.app.broker.pull_hold.held != count:
        assert time.monotonic() < deadline, f"{h.app.broker.pull_hold.held} pulls held, not {count}"
        await asyncio.sleep(0.01)


def test_long_poll_is_answered_when_a_message_arrives(tmp_path: Path) -> None:
    """A hold ends only on an arrival or at its suspend timeout. With a 60 s suspend timeout
    and an answer well before it, the arrival is what answered the pull."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "LP", ["TagA"] * 2)
            held = asyncio.create_task(
                pull(h, "LP", 0, 2, sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=60_000, timeout=90)
            )
            await until_held(h, 1)
            assert not held.done(), "a pull at the max offset with SUSPEND is held"
            await h.send("LP", b"late", queue_id=0)
            resp = await asyncio.wait_for(held, 30)  # half the suspend timeout: woken by the arrival
            assert head(resp) == (ResponseCode.SUCCESS, 3, 0, 3)
            assert [r.body for r in decode_records(resp.body)] == [b"late"]
            assert h.app.broker.pull_hold.held == 0
            # A message on another queue does not answer a pull held on queue 0: it is held
            # its whole suspend timeout (had the arrival woken it, it would end sooner).
            started = time.monotonic()
            other = asyncio.create_task(
                pull(h, "LP", 0, 3, sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=1000, timeout=30)
            )
            await until_held(h, 1)
            await h.send("LP", b"elsewhere", queue_id=1)
            resp = await asyncio.wait_for(other, 20)
            assert head(resp)[0] == ResponseCode.PULL_NOT_FOUND
            assert time.monotonic() - started >= 1.0 - 0.05

    asyncio.run(main())


def test_long_poll_times_out_with_pull_not_found(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "LPT", ["TagA"])
            # Held for its suspend timeout (not less), then answered: the call's own 30 s timeout
            # would fail the test if the broker held it for good. How much later than 1.2 s
            # the answer comes depends on the machine, so that is not checked.
            started = time.monotonic()
            resp = await pull(h, "LPT", 0, 1, sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=1200, timeout=30)
            elapsed = time.monotonic() - started
            assert head(resp) == (ResponseCode.PULL_NOT_FOUND, 1, 0, 1)
            assert elapsed >= 1.2 - 0.05, f"held {elapsed:.3f}s for a 1.2 s suspend timeout"
            # On an empty queue too (offset 0 -> 19 after the hold).
            await create_topic(h, "LPE", 1)
            started = time.monotonic()
            resp = await pull(h, "LPE", 0, 0, sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=500, timeout=30)
            elapsed = time.monotonic() - started
            assert head(resp)[0] == ResponseCode.PULL_NOT_FOUND
            assert elapsed >= 0.5 - 0.05, elapsed
            # Without SUSPEND the pull is not held at all: its 60 s suspend timeout would
            # outlast the call's 30 s timeout.
            resp = await pull(h, "LPT", 0, 1, suspendTimeoutMillis=60_000, timeout=30)
            assert head(resp)[0] == ResponseCode.PULL_NOT_FOUND and h.app.broker.pull_hold.held == 0

    asyncio.run(main())


# -- commit offset ---------------------------------------------------------------------------------
def test_commit_offset_flag_stores_the_commit_offset(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "CO", ["TagA"] * 4)
            offsets = h.app.broker.offsets
            resp = await pull(h, "CO", 0, 2, sysFlag=COMMIT_OFFSET | SUBSCRIPTION, commitOffset=2)
            assert resp.code == ResponseCode.SUCCESS
            assert offsets.query("cg", "CO", 0) == 2
            query = {"consumerGroup": "cg", "topic": "CO", "queueId": 0}
            resp = await h.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
            assert (resp.code, resp.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "2")
            # Without the flag the commitOffset field is ignored.
            await pull(h, "CO", 0, 3, sysFlag=SUBSCRIPTION, commitOffset=3)
            assert offsets.query("cg", "CO", 0) == 2
            # A pull that found nothing still commits (the commit does not depend on the result).
            resp = await pull(h, "CO", 0, 4, sysFlag=COMMIT_OFFSET | SUBSCRIPTION, commitOffset=4)
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert offsets.query("cg", "CO", 0) == 4

    asyncio.run(main())


def test_commit_offset_of_a_held_pull_is_stored(tmp_path: Path) -> None:
    """The C++ consumer's steady state: caught up, every pull has SUSPEND|SUBSCRIPTION|COMMIT_OFFSET and
    is held. J PullMessageProcessor.processRequest commits the offset after suspending the request
    (``storeOffsetEnable = brokerAllowSuspend && hasCommitOffsetFlag && role != SLAVE`` is evaluated on the
    first pass, whose response is null because it is held). ledgermq's _pull returns the re-run
    (allow_suspend=False) instead, so a held pull never commits its offset."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "Held", ["TagA"] * 3)
            resp = await pull(
                h,
                "Held",
                0,
                3,
                sysFlag=COMMIT_OFFSET | SUSPEND | SUBSCRIPTION,
                commitOffset=3,
                suspendTimeoutMillis=300,
                timeout=10,
            )
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert h.app.broker.offsets.query("cg", "Held", 0) == 3

    asyncio.run(main())
