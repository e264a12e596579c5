"""SEND_MESSAGE (v1), SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and the C++ batch (V2, m="1") over the wire.

Expected behaviour is RocketMQ 4.9.7's (J broker/.../processor/SendMessageProcessor.java,
AbstractSendMessageProcessor.msgCheck, common/.../topic/TopicValidator.java) and docs/formats.md §3.1/§4.
Where ledgermq deliberately differs (C++ batches stored as separate messages; a read-only
broker refusing every send) the test says so.

The raw-frame helpers at the top are shared with the other test modules of this directory:
they read the response header exactly as it came over the wire, so "every extFields value is
a JSON string" (what the C++ client needs, §1) can be checked, which a decoded
RemotingCommand cannot show.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import orjson

from ledgermq.broker.metadata_log import read_current
from ledgermq.config import FlushDiskType
from ledgermq.protocol import properties as P
from ledgermq.protocol.batch import BatchEntry, encode_batch
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_record, decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.broker.harness import Harness, running_broker

BORN = 1_700_000_000_123
SEND_HEADER_KEYS = ("msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON")


# -- raw frames (shared) ---------------------------------------------------------------
def frame(header: dict[str, Any] | bytes, body: bytes = b"") -> bytes:
    """A JSON frame. A dict header is written the way the C++ client writes it (trailing newline)."""
    raw = header if isinstance(header, bytes) else orjson.dumps(header) + b"\n"
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def cpp_header(code: int, ext: dict[str, Any], opaque: int = 7) -> dict[str, Any]:
    """A request header as rocketmq-client-cpp builds it: numbers mixed with strings, ACL keys, remark ""."""
    return {
        "code": code,
        "extFields": {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "c2lnbmF0dXJl", **ext},
        "flag": 0,
        "language": "CPP",
        "opaque": opaque,
        "remark": "",
        "version": 333,
    }


async def read_raw(reader: asyncio.StreamReader, timeout: float = 5.0) -> tuple[dict[str, Any], bytes]:
    """One response frame: (the header JSON exactly as sent, body)."""
    length, word = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), timeout))
    assert word >> 24 == 0, f"response serialize type {word >> 24}, the C++ client needs JSON (0)"
    header_len = word & 0xFFFFFF
    rest = await asyncio.wait_for(reader.readexactly(length - 4), timeout)
    return orjson.loads(rest[:header_len]), rest[header_len:]


async def raw_call(port: int, data: bytes, timeout: float = 5.0) -> tuple[dict[str, Any], bytes]:
    """Send raw bytes on a fresh connection and read one response frame."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(data)
        await writer.drain()
        return await read_raw(reader, timeout)
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 2)
        except (OSError, TimeoutError):
            pass


def assert_wire_response(header: dict[str, Any], opaque: int, keys: tuple[str, ...] = ()) -> dict[str, str]:
    """What the C++ client needs from every response header (§7.3); returns extFields."""
    assert isinstance(header["code"], int) and isinstance(header["opaque"], int) and isinstance(header["flag"], int)
    assert header["opaque"] == opaque and header["flag"] & 1 == 1
    ext = header.get("extFields")
    assert isinstance(ext, dict), f"extFields must always be an object: {header}"
    not_strings = {k: v for k, v in ext.items() if not isinstance(v, str)}
    assert not not_strings, f"extFields values must be JSON strings: {not_strings}"
    missing = [k for k in keys if k not in ext]
    assert not missing, f"response header lacks {missing}: {header}"
    return ext


# -- request builders ------------------------------------------------------------------
def props(**extra: str) -> str:
    return P.encode_properties({"TAGS": "TagA", "UNIQ_KEY": "AB" * 16, "WAIT": "true", **extra})


def v2(topic: str, queue_id: int = 0, properties: str | None = None, **over: Any) -> dict[str, Any]:
    header: dict[str, Any] = {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": BORN,
        "h": 0,
        "i": props() if properties is None else properties,
        "j": 0,
        "k": "false",
        "m": "false",
    }
    header.update(over)
    return {k: v for k, v in header.items() if v is not None}


def v1(topic: str, queue_id: int = 0, properties: str | None = None, **over: Any) -> dict[str, Any]:
    header: dict[str, Any] = {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": BORN,
        "flag": 0,
        "properties": props() if properties is None else properties,
        "reconsumeTimes": 0,
        "unitMode": "false",
        "batch": "false",
    }
    header.update(over)
    return {k: v for k, v in header.items() if v is not None}


async def send_v2(
    harness: Harness, topic: str, body: bytes = b"body", /, queue_id: int = 0, **over: Any
) -> RemotingCommand:
    """A SEND_MESSAGE_V2; ``over`` replaces header keys a..n (None drops one)."""
    return await harness.call(RequestCode.SEND_MESSAGE_V2, v2(topic, queue_id, **over), body)


def record_at(h: Harness, msg_id: str) -> MessageRecord:
    """The stored record an offset message id points at (the id must name this broker)."""
    host, offset = decode_offset_msg_id(msg_id)
    assert host == ("127.0.0.1", h.app.port), host
    raw = h.app.broker.store.look_message_by_offset(offset)
    assert raw is not None, f"no record at {offset}"
    rec = decode_record(raw)
    assert rec.physical_offset == offset
    return rec


def max_phy(h: Harness) -> int:
    return h.app.broker.store.max_phy_offset


# -- v1 / v2 / batch --------------------------------------------------------------------
def test_send_v1_from_a_cpp_style_frame(tmp_path: Path) -> None:
    """Code 10 with v1 names, JSON numbers among the values, C++ trailing 0x02 and newline, ACL keys."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            ext = {
                "producerGroup": "pg",
                "topic": "CppT",
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "queueId": 1,
                "sysFlag": 0,
                "bornTimestamp": str(BORN),
                "flag": 5,
                "properties": "TAGS\x01TagC\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01" + "CD" * 16 + "\x02WAIT\x01true\x02",
                "reconsumeTimes": 0,
                "unitMode": "0",
                "maxReconsumeTimes": 16,
                "batch": "0",
            }
            header, body = await raw_call(h.app.port, frame(cpp_header(RequestCode.SEND_MESSAGE, ext, 4242), b"cpp!"))
            assert header["code"] == ResponseCode.SUCCESS, header
            assert body == b""
            out = assert_wire_response(header, 4242, SEND_HEADER_KEYS)
            assert (out["queueId"], out["queueOffset"]) == ("1", "0")
            assert (out["MSG_REGION"], out["TRACE_ON"]) == ("DefaultRegion", "true")

            rec = record_at(h, out["msgId"])
            assert (rec.topic, rec.queue_id, rec.queue_offset, rec.body) == ("CppT", 1, 0, b"cpp!")
            assert (rec.flag, rec.born_timestamp, rec.reconsume_times) == (5, BORN, 0)
            assert rec.born_host[0] == "127.0.0.1"
            assert rec.store_host == ("127.0.0.1", h.app.port)
            assert rec.properties == {
                "TAGS": "TagC",
                "KEYS": "k1 k2",
                "UNIQ_KEY": "CD" * 16,
                "CLUSTER": "TestCluster",
            }, "WAIT is not stored (4.9.7 strips it); CLUSTER is added"

    asyncio.run(main())


def test_send_v2_response_header_and_stored_record(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            offsets = []
            for n in range(3):
                resp = await send_v2(h, "V2T", f"m{n}".encode(), queue_id=2, h=n, j=1)
                assert resp.code == ResponseCode.SUCCESS, resp
                assert resp.remark is None
                assert set(SEND_HEADER_KEYS) <= set(resp.ext_fields)
                assert resp.ext_fields["queueId"] == "2"
                assert (resp.ext_fields["MSG_REGION"], resp.ext_fields["TRACE_ON"]) == ("DefaultRegion", "true")
                offsets.append(resp.ext_fields["queueOffset"])
                rec = record_at(h, resp.ext_fields["msgId"])
                assert (rec.topic, rec.queue_id, rec.body, rec.flag, rec.reconsume_times) == (
                    "V2T",
                    2,
                    b"m%d" % n,
                    n,
                    1,
                )
                assert rec.queue_offset == int(resp.ext_fields["queueOffset"])
                assert P.WAIT not in rec.properties
                assert rec.properties[P.CLUSTER] == "TestCluster"
            assert offsets == ["0", "1", "2"]

            # The response of a JSON request is JSON with string values (raw check, V2 with C++ numbers).
            header, _ = await raw_call(h.app.port, frame(cpp_header(RequestCode.SEND_MESSAGE_V2, v2("V2T", 2), 9)))
            out = assert_wire_response(header, 9, SEND_HEADER_KEYS)
            assert header["code"] == 0 and out["queueOffset"] == "3"

    asyncio.run(main())


def test_send_batch_message_320(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            entries = [
                BatchEntry(n, b"batch-%d" % n, P.encode_properties({"UNIQ_KEY": f"{n:032X}", "KEYS": f"bk{n}"}))
                for n in range(3)
            ]
            header = v2("BatchT", 1, P.encode_properties({"WAIT": "true"}), m="true")
            resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, header, encode_batch(entries))
            assert resp.code == ResponseCode.SUCCESS, resp
            ids = resp.ext_fields["msgId"].split(",")
            assert len(ids) == 3
            assert (resp.ext_fields["queueId"], resp.ext_fields["queueOffset"]) == ("1", "0")
            for n, msg_id in enumerate(ids):
                rec = record_at(h, msg_id)
                assert (rec.topic, rec.queue_id, rec.queue_offset, rec.body, rec.flag) == (
                    "BatchT",
                    1,
                    n,
                    b"batch-%d" % n,
                    n,
                )
                assert rec.born_timestamp == BORN
                assert rec.properties[P.UNIQ_KEY] == f"{n:032X}"
                assert rec.properties["KEYS"] == f"bk{n}"
                assert rec.properties[P.CLUSTER] == "TestCluster"
                assert P.WAIT not in rec.properties

            # A second batch continues the queue's offsets.
            resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, header, encode_batch(entries[:1]))
            assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueOffset"] == "3"

    asyncio.run(main())


def test_send_v2_with_cpp_batch_flag_stores_each_message(tmp_path: Path) -> None:
    """C++ batches: 310 with m="1". ledgermq reads "1" as true and stores the entries separately
    (a Java broker's parseBoolean stores the whole body as one message, apache/rocketmq-client-cpp #363)."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            entries = [BatchEntry(0, b"c%d" % n, P.encode_properties({"UNIQ_KEY": f"{n:032X}"})) for n in range(2)]
            ext = v2("CppBatch", 0, "", m=1, k=0)
            header, _ = await raw_call(
                h.app.port, frame(cpp_header(RequestCode.SEND_MESSAGE_V2, ext, 31), encode_batch(entries))
            )
            out = assert_wire_response(header, 31, SEND_HEADER_KEYS)
            assert header["code"] == ResponseCode.SUCCESS, header
            ids = out["msgId"].split(",")
            assert [record_at(h, i).body for i in ids] == [b"c0", b"c1"]
            await h.dispatched()
            assert [m.body for m in await h.pull("cg", "CppBatch")] == [b"c0", b"c1"]

            # m="0" (what C++ sends for single messages) is not a batch: the body is stored as is.
            resp = await send_v2(h, "CppBatch", encode_batch(entries), m="0")
            assert resp.code == ResponseCode.SUCCESS and "," not in resp.ext_fields["msgId"]
            assert record_at(h, resp.ext_fields["msgId"]).body == encode_batch(entries)

    asyncio.run(main())


def test_send_batch_with_malformed_body_stores_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            good = encode_batch([BatchEntry(0, b"x", P.encode_properties({"UNIQ_KEY": "0" * 32}))])
            before = max_phy(h)
            for body in (b"", good[:-1], good + b"\x00", b"\x00\x00\x00\x05junk", b"{}" * 20):
                resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("BadBatch", 0, m="true"), body)
                assert resp.code != ResponseCode.SUCCESS, (body, resp)
                assert resp.remark, resp
            assert max_phy(h) == before

    asyncio.run(main())


def test_batch_entries_asking_for_delay_or_a_transaction_are_refused(tmp_path: Path) -> None:
    """Nothing accepted silently: RocketMQ would store such an entry at once as an ordinary message."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            plain = BatchEntry(0, b"ok", P.encode_properties({"UNIQ_KEY": "0" * 32}))
            before = max_phy(h)
            for extra, batch_props, sysflag in (
                ({P.DELAY: "3"}, "", 0),
                ({P.TRAN_MSG: "true", "PGROUP": "pg"}, "", 0),
                ({}, P.encode_properties({P.DELAY: "2"}), 0),
                ({}, "", 0x4),  # the batch itself flagged TRANSACTION_PREPARED_TYPE
            ):
                odd = BatchEntry(0, b"odd", P.encode_properties({"UNIQ_KEY": "1" * 32, **extra}))
                header = v2("BatchRefused", 0, batch_props, m="true", f=sysflag)
                resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, header, encode_batch([plain, odd]))
                assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (extra, resp)
                assert "batch cannot hold" in resp.remark
            assert max_phy(h) == before
            resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("BatchRefused", 0, m="true"), encode_batch([plain]))
            assert resp.code == ResponseCode.SUCCESS, resp

    asyncio.run(main())


# -- topics -------------------------------------------------------------------------------
def test_auto_create_from_tbw102_takes_min_of_requested_and_default_queues(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            topics = h.app.broker.topics
            tbw = topics.get("TBW102")
            assert tbw is not None and (tbw.write_queue_nums, tbw.perm) == (8, 7)

            assert (await send_v2(h, "Auto3", d=3)).code == ResponseCode.SUCCESS
            assert (await send_v2(h, "Auto100", d=100)).code == ResponseCode.SUCCESS
            t3, t100 = topics.get("Auto3"), topics.get("Auto100")
            assert t3 is not None and (t3.read_queue_nums, t3.write_queue_nums, t3.perm) == (3, 3, 6)
            assert t100 is not None and (t100.read_queue_nums, t100.write_queue_nums, t100.perm) == (8, 8, 6)
            saved = read_current(tmp_path / "config" / "topics.json", "topicConfigTable")["topicConfigTable"]
            assert saved["Auto3"]["writeQueueNums"] == 3 and saved["Auto100"]["readQueueNums"] == 8

            # An existing topic is not changed by a later d.
            assert (await send_v2(h, "Auto3", d=8)).code == ResponseCode.SUCCESS
            t3 = topics.get("Auto3")
            assert t3 is not None and t3.write_queue_nums == 3

    asyncio.run(main())


def test_topic_not_exist_when_auto_create_is_off(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, auto_create_topic_enable=False) as h:
            assert h.app.broker.topics.get("TBW102") is None
            before = max_phy(h)
            resp = await send_v2(h, "NoSuchTopic")
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST, resp
            assert resp.remark and "NoSuchTopic" in resp.remark
            # A default topic without INHERIT does not create either.
            create = {
                "topic": "Plain",
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "order": "false",
            }
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
            resp = await send_v2(h, "NoSuchTopic", c="Plain")
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST, resp
            assert h.app.broker.topics.get("NoSuchTopic") is None
            assert max_phy(h) == before
            # Existing topics still take messages.
            assert (await send_v2(h, "Plain", queue_id=1)).code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_illegal_topic_names_are_refused(tmp_path: Path) -> None:
    """TopicValidator.validateTopic: SYSTEM_ERROR for blank, illegal characters, longer than 127."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            before = max_phy(h)
            for topic in ("", "   ", "bad topic", "a/b", "../x", "t\tab", "T" * 128, "Tö", "a.b"):
                resp = await send_v2(h, topic)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (topic, resp)
                assert resp.remark, resp
                assert h.app.broker.topics.get(topic) is None
            assert max_phy(h) == before
            assert (await send_v2(h, "T" * 127)).code == ResponseCode.SUCCESS
            assert (await send_v2(h, "%|_-aZ09")).code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_topic_with_trailing_newline_is_refused(tmp_path: Path) -> None:
    """J TopicValidator.isTopicOrGroupIllegal checks every character: "\\n" is illegal. ledgermq's
    topics.topic_error (and the store's check) use re.match with "$", which also matches before a
    trailing newline, so "Topic\\n" passes and is created and stored."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            before = max_phy(h)
            resp = await send_v2(h, "Topic\n")
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp
            assert h.app.broker.topics.get("Topic\n") is None
            assert max_phy(h) == before

    asyncio.run(main())


def test_sending_to_system_topics_is_forbidden(tmp_path: Path) -> None:
    """TopicValidator.isNotAllowedSendTopic: NO_PERMISSION "Sending message to topic[...] is forbidden."."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            before = max_phy(h)
            for topic in (
                "SCHEDULE_TOPIC_XXXX",
                "RMQ_SYS_TRANS_HALF_TOPIC",
                "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                "TRANS_CHECK_MAX_TIME_TOPIC",
                "SELF_TEST_TOPIC",
                "OFFSET_MOVED_EVENT",
            ):
                resp = await send_v2(h, topic)
                assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp)
                assert resp.remark and "forbidden" in resp.remark
                batch = encode_batch([BatchEntry(0, b"x", "")])
                resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2(topic, 0, m="true"), batch)
                assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp)
            assert max_phy(h) == before

    asyncio.run(main())


# -- queues -------------------------------------------------------------------------------
def test_queue_id_out_of_range_is_system_error(tmp_path: Path) -> None:
    """msgCheck: queueId >= max(read, write) queue nums -> SYSTEM_ERROR "request queueId[n] is illegal..."."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert (await send_v2(h, "Q4", queue_id=3, d=4)).code == ResponseCode.SUCCESS
            before = max_phy(h)
            for queue_id in (4, 5, 1000, 2**31 - 1):
                resp = await send_v2(h, "Q4", queue_id=queue_id)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (queue_id, resp)
                assert resp.remark and f"queueId[{queue_id}]" in resp.remark
                batch = encode_batch([BatchEntry(0, b"x", "")])
                resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("Q4", queue_id, m="true"), batch)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (queue_id, resp)
            assert max_phy(h) == before

    asyncio.run(main())


def test_negative_queue_id_lets_the_broker_pick_a_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            seen = set()
            for n in range(40):
                resp = await send_v2(h, "Pick", b"%d" % n, queue_id=-1, d=4)
                assert resp.code == ResponseCode.SUCCESS, resp
                queue_id = int(resp.ext_fields["queueId"])
                assert 0 <= queue_id < 4
                assert record_at(h, resp.ext_fields["msgId"]).queue_id == queue_id
                seen.add(queue_id)
            assert len(seen) > 1, "random % writeQueueNums spreads over the queues"
            resp = await send_v2(h, "Pick", queue_id=-7)
            assert resp.code == ResponseCode.SUCCESS and 0 <= int(resp.ext_fields["queueId"]) < 4

    asyncio.run(main())


# -- permissions, retries, flush ----------------------------------------------------------
def test_read_only_broker_refuses_sends(tmp_path: Path) -> None:
    """brokerPermission=4 (READ only). ledgermq answers NO_PERMISSION for every send; a Java 4.9.7 broker
    refuses only order topics in msgCheck and relies on the name server route (perm & brokerPermission)."""

    async def main() -> None:
        async with running_broker(tmp_path, broker_permission=4) as h:
            before = max_phy(h)
            resp = await send_v2(h, "RO")
            assert resp.code == ResponseCode.NO_PERMISSION, resp
            assert resp.remark and "forbidden" in resp.remark
            batch = encode_batch([BatchEntry(0, b"x", "")])
            resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("RO", 0, m="true"), batch)
            assert resp.code == ResponseCode.NO_PERMISSION, resp
            assert max_phy(h) == before
            # Reading is still allowed.
            pull = {
                "consumerGroup": "cg",
                "topic": "TBW102",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 1,
                "sysFlag": 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            }
            assert (await h.call(RequestCode.PULL_MESSAGE, pull)).code == ResponseCode.PULL_NOT_FOUND

    asyncio.run(main())


def test_retry_topic_sends_past_max_reconsume_times_go_to_the_dlq(tmp_path: Path) -> None:
    """SendMessageProcessor.handleRetryAndDLQ: reconsumeTimes >= maxReconsumeTimes (header l, else the
    group's retryMaxTimes 16) -> %DLQ%group, queue 0; the DLQ topic has 1 queue and perm 6."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            retry = "%RETRY%cg"
            resp = await send_v2(h, retry, b"r2", j=2, l=3)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert record_at(h, resp.ext_fields["msgId"]).topic == retry
            cfg = h.app.broker.topics.get(retry)
            assert cfg is not None and (cfg.write_queue_nums, cfg.perm) == (1, 6)

            resp = await send_v2(h, retry, b"r3", j=3, l=3)
            assert resp.code == ResponseCode.SUCCESS, resp
            dead = record_at(h, resp.ext_fields["msgId"])
            assert (dead.topic, dead.queue_id, dead.body, dead.reconsume_times) == ("%DLQ%cg", 0, b"r3", 3)
            dlq = h.app.broker.topics.get("%DLQ%cg")
            assert dlq is not None and (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)

            # Without l the group's retryMaxTimes (16) decides.
            resp = await send_v2(h, retry, b"r15", j=15)
            assert record_at(h, resp.ext_fields["msgId"]).topic == retry
            resp = await send_v2(h, retry, b"r16", j=16)
            assert record_at(h, resp.ext_fields["msgId"]).topic == "%DLQ%cg"
            await h.dispatched()
            assert [m.body for m in await h.pull("cg", "%DLQ%cg")] == [b"r3", b"r16"]
            assert [m.body for m in await h.pull("cg", retry)] == [b"r2", b"r15"]

    asyncio.run(main())


def test_sync_flush_send_answers_after_the_flush(tmp_path: Path) -> None:
    async def main() -> None:
        store = dict(flush_disk_type=FlushDiskType.SYNC_FLUSH, flush_interval_commitlog_ms=10_000)
        async with running_broker(tmp_path, store=store) as h:
            for n in range(3):
                resp = await send_v2(h, "Durable", b"d%d" % n)
                assert resp.code == ResponseCode.SUCCESS, resp  # PUT_OK, not FLUSH_DISK_TIMEOUT
                rec = record_at(h, resp.ext_fields["msgId"])
                end = rec.physical_offset + rec.store_size
                assert h.app.broker.store.flushed_phy_offset >= end, "answered before the message was flushed"
            batch = encode_batch([BatchEntry(0, b"b%d" % n, "") for n in range(2)])
            resp = await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("Durable", 0, m="true"), batch)
            assert resp.code == ResponseCode.SUCCESS, resp
            last = record_at(h, resp.ext_fields["msgId"].split(",")[-1])
            assert h.app.broker.store.flushed_phy_offset >= last.physical_offset + last.store_size

    asyncio.run(main())


def test_pull_returns_what_v1_v2_and_batch_sends_stored(tmp_path: Path) -> None:
    """One queue fed by every send flavour reads back in order, records intact (CRC checked)."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert (await h.call(RequestCode.SEND_MESSAGE, v1("Mixed"), b"one")).code == 0
            assert (await send_v2(h, "Mixed", b"two")).code == 0
            batch = encode_batch([BatchEntry(0, b"three", ""), BatchEntry(0, b"four", "")])
            assert (await h.call(RequestCode.SEND_BATCH_MESSAGE, v2("Mixed", 0, m="true"), batch)).code == 0
            await h.dispatched()
            records = await h.pull("cg", "Mixed")
            assert [r.body for r in records] == [b"one", b"two", b"three", b"four"]
            assert [r.queue_offset for r in records] == [0, 1, 2, 3]
            raw = b"".join(h.app.broker.store.look_message_by_offset(r.physical_offset) or b"" for r in records)
            assert [r.body for r in decode_records(raw)] == [b"one", b"two", b"three", b"four"]

    asyncio.run(main())


def test_the_send_answer_carries_the_response_header_as_its_encoder_writes_it() -> None:
    """``stored_answer`` writes SendMessageResponseHeader's extFields itself (no header object
    per send): the same keys, order, strings and remark as the header class gives."""
    from types import SimpleNamespace

    from ledgermq.broker.processors.send_answer import stored_answer
    from ledgermq.protocol.codes import SerializeType
    from ledgermq.protocol.headers_send import SendMessageResponseHeader
    from ledgermq.store.results import AppendResult, PutResult, PutStatus

    counted: list[tuple[str, int, int]] = []
    for trace_on, ids, status in (
        (True, ["0A00000100002A9F0000000000000000"], PutStatus.PUT_OK),
        (False, ["0A00000100002A9F0000000000000000", "0A00000100002A9F0000000000000100"], PutStatus.PUT_OK),
        (True, ["0A00000100002A9F0000000000000000"], PutStatus.FLUSH_SLAVE_TIMEOUT),
    ):
        broker: Any = SimpleNamespace(
            config=SimpleNamespace(region_id="RegionX", trace_on=trace_on),
            stats=SimpleNamespace(count_put=lambda *a: counted.append(a)),
        )
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {}, opaque=41)
        request.serialize_type = SerializeType.ROCKETMQ
        append = AppendResult(256, 300, ids, 1, 77, len(ids), "T", 3)
        got = stored_answer(broker, request, PutResult(status, append), 3)
        want = request.response(
            ResponseCode.SUCCESS if status is PutStatus.PUT_OK else ResponseCode.FLUSH_SLAVE_TIMEOUT,
            None if status is PutStatus.PUT_OK else status.value,
            SendMessageResponseHeader(",".join(ids), 3, 77, "RegionX", trace_on).ext(),
        )
        assert got == want
        assert list(got.ext_fields) == list(want.ext_fields)  # the binary header keeps this order
        assert got.encode() == want.encode()
    assert counted == [("T", 1, 300), ("T", 2, 300), ("T", 1, 300)]
