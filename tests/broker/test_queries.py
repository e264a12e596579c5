"""Queue and message lookups over the wire: GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (KEYS, UNIQ_KEY, _UNIQUE_KEY_QUERY).

Expected behaviour: J broker/.../processor/AdminBrokerProcessor.java (offset queries),
QueryMessageProcessor.java, store/.../DefaultMessageStore.java and ConsumeQueue.getOffsetInQueueByTime
(4.9.7); docs/formats.md §3.3.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.broker.harness import Harness, running_broker
from tests.broker.test_send import assert_wire_response, cpp_header, frame, raw_call, record_at


async def queue_value(h: Harness, code: int, topic: str, queue_id: int, key: str = "offset", **extra: Any) -> int:
    resp = await h.call(code, {"topic": topic, "queueId": queue_id, **extra})
    assert resp.code == ResponseCode.SUCCESS, resp
    return int(resp.ext_fields[key])


async def send_spaced(h: Harness, topic: str, count: int, queue_id: int = 0) -> list[MessageRecord]:
    """``count`` messages at distinct store milliseconds; their stored records."""
    records = []
    for n in range(count):
        resp = await h.send(topic, b"s%d" % n, queue_id=queue_id, props={"UNIQ_KEY": f"{n:032X}"})
        records.append(record_at(h, resp.ext_fields["msgId"]))
        await asyncio.sleep(0.015)
    await h.dispatched()
    stamps = [r.store_timestamp for r in records]
    assert stamps == sorted(set(stamps)), stamps
    return records


# -- offsets and times ----------------------------------------------------------------------
def test_max_and_min_offset(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await queue_value(h, RequestCode.GET_MAX_OFFSET, "MM", 0) == 0
            assert await queue_value(h, RequestCode.GET_MIN_OFFSET, "MM", 0) == 0
            for _ in range(3):
                await h.send("MM", queue_id=0)
            await h.send("MM", queue_id=2)
            await h.dispatched()
            assert await queue_value(h, RequestCode.GET_MAX_OFFSET, "MM", 0) == 3
            assert await queue_value(h, RequestCode.GET_MIN_OFFSET, "MM", 0) == 0
            assert await queue_value(h, RequestCode.GET_MAX_OFFSET, "MM", 2) == 1
            assert await queue_value(h, RequestCode.GET_MAX_OFFSET, "MM", 1) == 0
            assert await queue_value(h, RequestCode.GET_MAX_OFFSET, "NoSuchTopic", 0) == 0

            # The C++ client's form (queueId a JSON number): answered with a string offset.
            for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET):
                header, _ = await raw_call(h.app.port, frame(cpp_header(code, {"topic": "MM", "queueId": 0}, 5)))
                ext = assert_wire_response(header, 5, ("offset",))
                assert header["code"] == 0 and ext["offset"] == ("3" if code == RequestCode.GET_MAX_OFFSET else "0")

    asyncio.run(main())


def test_search_offset_by_timestamp(tmp_path: Path) -> None:
    """ConsumeQueue.getOffsetInQueueByTime: the message stored at the time, else the nearer neighbour;
    the first message for an earlier time, the last one (max - 1) for a later time; 0 for no queue."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            recs = await send_spaced(h, "TS", 4)
            ts = [r.store_timestamp for r in recs]

            async def search(timestamp: int, topic: str = "TS", queue_id: int = 0) -> int:
                return await queue_value(
                    h, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, queue_id, timestamp=timestamp
                )

            for n, stamp in enumerate(ts):
                assert await search(stamp) == n
            assert await search(ts[0] - 10_000) == 0
            assert await search(0) == 0
            assert await search(ts[-1] + 10_000) == 3
            assert await search(ts[1] + 1) == 1  # nearer to message 1
            assert await search(ts[2] - 1) == 2  # nearer to message 2
            assert await search(ts[0], "TS", 1) == 0
            assert await search(ts[0], "NoSuchTopic") == 0

            header, _ = await raw_call(
                h.app.port,
                frame(
                    cpp_header(
                        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "TS", "queueId": 0, "timestamp": ts[2]}
                    )
                ),
            )
            assert header["code"] == 0 and assert_wire_response(header, 7, ("offset",))["offset"] == "2"

    asyncio.run(main())


def test_earliest_message_store_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            recs = await send_spaced(h, "ET", 2)
            ts = await queue_value(h, RequestCode.GET_EARLIEST_MSG_STORETIME, "ET", 0, "timestamp")
            assert ts == recs[0].store_timestamp
            assert abs(ts - time.time() * 1000) < 60_000
            # No queue: -1 (DefaultMessageStore.getEarliestMessageTime).
            assert await queue_value(h, RequestCode.GET_EARLIEST_MSG_STORETIME, "ET", 3, "timestamp") == -1
            header, _ = await raw_call(
                h.app.port, frame(cpp_header(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "ET", "queueId": 0}))
            )
            assert assert_wire_response(header, 7, ("timestamp",))["timestamp"] == str(ts)

    asyncio.run(main())


# -- messages -------------------------------------------------------------------------------------
def test_view_message_by_id(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            ids = []
            for n in range(3):
                resp = await h.send("View", b"v%d" % n, props={"KEYS": f"key{n}"})
                ids.append(resp.ext_fields["msgId"])
            for n, msg_id in enumerate(ids):
                _, offset = decode_offset_msg_id(msg_id)
                resp = await h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
                assert resp.code == ResponseCode.SUCCESS, resp
                [rec] = decode_records(resp.body)
                assert (rec.topic, rec.body, rec.physical_offset, rec.keys) == ("View", b"v%d" % n, offset, [f"key{n}"])
                assert rec.offset_msg_id == msg_id
            end = h.app.broker.store.max_phy_offset
            _, second = decode_offset_msg_id(ids[1])
            for bad in (end, end + 1000, second + 1, second - 1, -1, 2**62):
                resp = await h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": bad})
                assert resp.code == ResponseCode.SYSTEM_ERROR, (bad, resp)
                assert resp.remark == f"can not find message by the offset, {bad}"
                assert resp.body == b""

    asyncio.run(main())


def query_header(topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**62) -> dict[str, Any]:
    return {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin, "endTimestamp": end}


async def query(h: Harness, topic: str, key: str, **kw: Any) -> tuple[int, list[MessageRecord]]:
    extra = kw.pop("extra", {})
    resp = await h.call(RequestCode.QUERY_MESSAGE, {**query_header(topic, key, **kw), **extra})
    assert {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"} <= set(resp.ext_fields), resp
    if resp.code != ResponseCode.SUCCESS:
        assert resp.remark == "can not find message, maybe time range not correct", resp
        assert resp.body == b""
        return resp.code, []
    return resp.code, decode_records(resp.body)


def test_query_message_by_keys(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await h.send("QK", b"a", props={"KEYS": "k1 k2", "UNIQ_KEY": "A" * 32})
            await h.send("QK", b"b", queue_id=1, props={"KEYS": "k2", "UNIQ_KEY": "B" * 32})
            await h.send("QKOther", b"c", props={"KEYS": "k2", "UNIQ_KEY": "C" * 32})
            await h.dispatched()
            first = await h.call(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "QK", "queueId": 0})
            stored_at = int(first.ext_fields["timestamp"])

            code, recs = await query(h, "QK", "k2")
            assert code == ResponseCode.SUCCESS
            assert sorted(r.body for r in recs) == [b"a", b"b"], "only topic QK, both holders of k2"
            code, recs = await query(h, "QK", "k1")
            assert [r.body for r in recs] == [b"a"]
            code, recs = await query(h, "QK", "k2", max_num=1)
            assert code == ResponseCode.SUCCESS and len(recs) == 1
            assert (await query(h, "QK", "k3"))[0] == ResponseCode.QUERY_NOT_FOUND
            assert (await query(h, "QK", "k2", end=stored_at - 60_000))[0] == ResponseCode.QUERY_NOT_FOUND
            assert (await query(h, "QK", "k2", begin=stored_at + 60_000))[0] == ResponseCode.QUERY_NOT_FOUND
            assert (await query(h, "NoSuchTopic", "k2"))[0] == ResponseCode.QUERY_NOT_FOUND
            # Any key of the KEYS list, not a substring of it.
            assert (await query(h, "QK", "k"))[0] == ResponseCode.QUERY_NOT_FOUND
            assert (await query(h, "QK", "k1 k2"))[0] == ResponseCode.QUERY_NOT_FOUND

            # The header is all strings on the wire.
            header, body = await raw_call(
                h.app.port, frame(cpp_header(RequestCode.QUERY_MESSAGE, query_header("QK", "k1"), 8))
            )
            ext = assert_wire_response(header, 8, ("indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"))
            assert header["code"] == 0 and [r.body for r in decode_records(body)] == [b"a"]
            assert int(ext["indexLastUpdatePhyoffset"]) > 0

    asyncio.run(main())


def test_query_message_by_unique_key(tmp_path: Path) -> None:
    """UNIQ_KEY is indexed; with _UNIQUE_KEY_QUERY=true the broker uses defaultQueryMaxNum (32), not maxNum."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            uniq = "0A0B0C0D" * 4
            for n in range(3):  # e.g. a producer retry stored the same message three times
                await h.send("QU", b"u%d" % n, queue_id=n % 2, props={"UNIQ_KEY": uniq})
            await h.send("QU", b"other", props={"UNIQ_KEY": "F" * 32})
            await h.dispatched()

            code, recs = await query(h, "QU", uniq, max_num=1, extra={"_UNIQUE_KEY_QUERY": "true"})
            assert code == ResponseCode.SUCCESS
            assert sorted(r.body for r in recs) == [b"u0", b"u1", b"u2"]
            assert all(r.properties["UNIQ_KEY"] == uniq for r in recs)
            code, recs = await query(h, "QU", uniq, max_num=1)
            assert code == ResponseCode.SUCCESS and len(recs) == 1
            code, recs = await query(h, "QU", uniq, max_num=1, extra={"_UNIQUE_KEY_QUERY": "false"})
            assert len(recs) == 1
            code, recs = await query(h, "QU", "F" * 32, extra={"_UNIQUE_KEY_QUERY": "true"})
            assert [r.body for r in recs] == [b"other"]

    asyncio.run(main())
