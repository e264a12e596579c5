"""SQL92 property filters on the broker, over the wire: refusals (filter disabled, bad
expression, missing filter data, stale versions), CHECK_CLIENT_CONFIG (46), filtering on
pulls with offsets moving past non-matching messages, and long polling.

Expected behaviour: RocketMQ 4.9.7 PullMessageProcessor, ClientManageProcessor.checkClientConfig
and ConsumerFilterManager.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from tests.broker.harness import Harness, running_broker
from tests.broker.test_pull import SUBSCRIPTION, SUSPEND, head, pull

SQL = "SQL92"


def sql_heartbeat(group: str, topic: str, expression: str, version: int, expression_type: str = SQL) -> bytes:
    sub = {
        "classFilterMode": False,
        "codeSet": [],
        "expressionType": expression_type,
        "subString": expression,
        "subVersion": version,
        "tagsSet": [],
        "topic": topic,
    }
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": [sub],
        "unitMode": False,
    }
    return fastjson.dumps({"clientID": "127.0.0.1@sql", "consumerDataSet": [consumer], "producerDataSet": []})


async def check_client(h: Harness, expression: str, expression_type: str = SQL) -> RemotingCommand:
    body = {
        "clientId": "127.0.0.1@sql",
        "group": "cg",
        "subscriptionData": {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": expression_type,
            "subString": expression,
            "subVersion": 1,
            "tagsSet": [],
            "topic": "T",
        },
    }
    return await h.call(RequestCode.CHECK_CLIENT_CONFIG, {}, fastjson.dumps(body))


async def sql_pull(h: Harness, topic: str, expr: str, offset: int = 0, **over: Any) -> RemotingCommand:
    return await pull(h, topic, 0, offset, subscription=expr, expressionType=SQL, **over)


# (a, body size) per message: a few bodies beyond 2 KiB take the store's two-read path.
MESSAGES = [(str(n % 7), 5000 if n % 5 == 0 else 100) for n in range(40)]


async def fill(h: Harness, topic: str) -> None:
    for n, (a, size) in enumerate(MESSAGES):
        props = {"a": a, "TAGS": "even" if n % 2 == 0 else "odd"}
        if n % 3 == 0:
            props["b"] = "x"
        await h.send(topic, bytes([65 + n % 26]) * size, props=props)
    await h.dispatched()


def test_a_broker_without_property_filter_refuses_clearly(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await fill(h, "T")
            resp = await sql_pull(h, "T", "a > 3")
            assert resp.code == ResponseCode.SYSTEM_ERROR and resp.body == b""
            assert "does not support consumer to filter message by SQL92" in (resp.remark or "")
            assert "enablePropertyFilter" in (resp.remark or "")
            resp = await check_client(h, "a > 3")
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "does not support consumer to filter message by SQL92" in (resp.remark or "")
            # A TAG subscription passes the check; tag pulls are unaffected.
            assert (await check_client(h, "TagA", "TAG")).code == ResponseCode.SUCCESS
            assert head(await pull(h, "T", subscription="even"))[0] == ResponseCode.SUCCESS
            # A heartbeat is never refused (Java registers the filter data regardless), the
            # pull that relies on it is.
            hb = await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "a > 3", 5))
            assert hb.code == ResponseCode.SUCCESS
            resp = await pull(h, "T", sysFlag=0, subscription=None, subVersion=5)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            # A bad expression is still a parse failure first (RocketMQ's order of checks).
            assert (await sql_pull(h, "T", "a >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

    asyncio.run(main())


def test_pulls_return_exactly_the_matching_messages(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, enable_property_filter=True) as h:
            await fill(h, "T")
            for expr, wanted in (
                ("a > 3", lambda n, a: int(a) > 3),
                ("a BETWEEN 2 AND 4 AND b IS NOT NULL", lambda n, a: 2 <= int(a) <= 4 and n % 3 == 0),
                ("TAGS = 'odd' OR a IN ('0')", lambda n, a: n % 2 == 1 or a == "0"),
                ("NOT (b = 'x')", lambda n, a: False),  # b absent: unknown, and NOT keeps it so
                ("b <> 'x' OR b IS NULL", lambda n, a: n % 3 != 0),
            ):
                expected = [n for n, (a, _) in enumerate(MESSAGES) if wanted(n, a)]
                got: list[int] = []
                offset, pulls = 0, 0
                while offset < len(MESSAGES):
                    resp = await sql_pull(h, "T", expr, offset, maxMsgNums=4)
                    code, nxt, _, _ = head(resp)
                    assert nxt > offset, (expr, offset, code)  # never an empty pull that stays put
                    if code == ResponseCode.SUCCESS:
                        records = decode_records(resp.body)
                        assert all(len(r.body) == MESSAGES[r.queue_offset][1] for r in records)
                        got += [r.queue_offset for r in records]
                    else:
                        assert code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.body == b""
                    offset, pulls = nxt, pulls + 1
                    assert pulls < 50
                assert got == expected, expr

            # A range with no match at all: retry immediately, offset moved to the end.
            resp = await sql_pull(h, "T", "a = 'nothing'")
            assert head(resp) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 40, 0, 40)
            # A property that is not a number: the comparison errs, the message is skipped.
            await h.send("T", b"odd one", props={"a": "seven"})
            await h.dispatched()
            assert head(await sql_pull(h, "T", "a > 3 OR TRUE", 40))[0] == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert head(await sql_pull(h, "T", "a = 'seven'", 40))[0] == ResponseCode.SUCCESS

    asyncio.run(main())


def test_bad_expressions_and_the_heartbeat_path(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, enable_property_filter=True) as h:
            await fill(h, "T")
            resp = await sql_pull(h, "T", "a > 'x'")
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "parse the consumer's subscription failed" in (resp.remark or "")
            assert "Value ''x'' cannot be compared." in (resp.remark or "") and "column 3" in (resp.remark or "")
            resp = await pull(h, "T", subscription="a = 1", expressionType="XPATH")
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "XPATH" in (resp.remark or "")
            resp = await check_client(h, "a = = 1")
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 5" in (resp.remark or "")
            assert (await check_client(h, "a = 1")).code == ResponseCode.SUCCESS
            # No body or no subscription: nothing to check (Java answers SUCCESS); a body that
            # is not JSON is a clear SYSTEM_ERROR.
            assert (await h.call(RequestCode.CHECK_CLIENT_CONFIG, {})).code == ResponseCode.SUCCESS
            assert (await h.call(RequestCode.CHECK_CLIENT_CONFIG, {}, b'{"clientId":"x"}')).code == ResponseCode.SUCCESS
            bad = await h.call(RequestCode.CHECK_CLIENT_CONFIG, {}, b"{not json")
            assert bad.code == ResponseCode.SYSTEM_ERROR and "CHECK_CLIENT_CONFIG body does not decode" in (
                bad.remark or ""
            )

            java = dict(sysFlag=0, subscription=None)  # Java: the subscription comes from the heartbeat
            hb = await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "a = 6", 10))
            assert hb.code == ResponseCode.SUCCESS
            resp = await pull(h, "T", subVersion=10, **java)
            assert head(resp)[0] == ResponseCode.SUCCESS
            assert {r.properties["a"] for r in decode_records(resp.body)} == {"6"}
            # A newer subVersion than the broker holds: SUBSCRIPTION_NOT_LATEST.
            assert (await pull(h, "T", subVersion=11, **java)).code == ResponseCode.SUBSCRIPTION_NOT_LATEST
            # An older version changes nothing; a newer one with a bad expression drops the filter.
            await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "a = 5", 9))
            resp = await pull(h, "T", subVersion=10, **java)
            assert {r.properties["a"] for r in decode_records(resp.body)} == {"6"}
            await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "a = ", 12))
            resp = await pull(h, "T", subVersion=12, **java)
            assert resp.code == ResponseCode.FILTER_DATA_NOT_EXIST
            assert "'a ='" in (resp.remark or "")
            await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "a = 5", 13))
            resp = await pull(h, "T", subVersion=13, **java)
            assert {r.properties["a"] for r in decode_records(resp.body)} == {"5"}
            # Back to tags: the filter data no longer matters.
            await h.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("cg", "T", "odd", 14, "TAG"))
            resp = await pull(h, "T", subVersion=14, **java)
            assert {r.tags for r in decode_records(resp.body)} == {"odd"}

    asyncio.run(main())


def test_a_held_pull_wakes_only_for_a_matching_message(tmp_path: Path) -> None:
    """As RocketMQ's PullRequestHoldService: arrivals the filter rejects do not answer a
    held pull; a matching one does, and a timeout answers with the offset moved on."""

    async def main() -> None:
        async with running_broker(tmp_path, enable_property_filter=True) as h:
            await h.send("LP", b"first", props={"a": "1"})
            await h.dispatched()
            flags = dict(sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=5000, timeout=10)
            held = asyncio.create_task(sql_pull(h, "LP", "a = 2", 1, **flags))
            await asyncio.sleep(0.2)
            for n in range(3):
                await h.send("LP", b"no %d" % n, props={"a": "3"})
            await h.dispatched()
            await asyncio.sleep(0.3)
            assert not held.done(), "non-matching arrivals must not answer the held pull"
            await h.send("LP", b"yes", props={"a": "2"})
            resp = await asyncio.wait_for(held, 5)
            assert head(resp)[:2] == (ResponseCode.SUCCESS, 5)
            assert [r.body for r in decode_records(resp.body)] == [b"yes"]
            # Only non-matching arrivals until the timeout: PULL_NOT_FOUND, offset moved past them.
            short = dict(sysFlag=SUSPEND | SUBSCRIPTION, suspendTimeoutMillis=800, timeout=10)
            held = asyncio.create_task(sql_pull(h, "LP", "a = 2", 5, **short))
            await asyncio.sleep(0.2)
            await h.send("LP", b"no more", props={"a": "4"})
            resp = await asyncio.wait_for(held, 5)
            assert head(resp)[:2] == (ResponseCode.PULL_NOT_FOUND, 6) and resp.body == b""
            # TAG pulls are held and woken as before.
            held = asyncio.create_task(pull(h, "LP", 0, 6, subscription="*", **flags))
            await asyncio.sleep(0.2)
            await h.send("LP", b"tagged", props={"a": "0"})
            assert head(await asyncio.wait_for(held, 5))[:2] == (ResponseCode.SUCCESS, 7)

    asyncio.run(main())


def test_messages_dispatched_after_first_use_are_answered_from_the_dispatch_cache(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, enable_property_filter=True) as h:
            await h.send("C", b"before", props={"a": "4"})
            await h.dispatched()
            expr = "a > 3 AND b IS NULL"
            assert head(await sql_pull(h, "C", expr))[0] == ResponseCode.SUCCESS  # first use: watched from now on
            await fill(h, "C")
            cache = h.app.broker.filter_cache
            assert cache is not None
            from ledgermq.filter import compile_expression

            verdict = cache.verdict_of("C", 0, compile_expression(expr))
            store = h.app.broker.store
            known = [verdict(n, store.commitlog_offset_in_queue("C", 0, n)) for n in range(41)]
            assert known[0] is None  # dispatched before the first pull
            assert known[1:] == [int(a) > 3 and n % 3 != 0 for n, (a, _) in enumerate(MESSAGES)]
            assert verdict(1, 12345) is None  # another record at that offset: no answer
            resp = await sql_pull(h, "C", expr, 1, maxMsgNums=64)
            got = [r.queue_offset - 1 for r in decode_records(resp.body)]
            assert got == [n for n, (a, _) in enumerate(MESSAGES) if int(a) > 3 and n % 3 != 0]

    asyncio.run(main())
