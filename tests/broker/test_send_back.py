"""CONSUMER_SEND_MSG_BACK: copies to %RETRY%group (via SCHEDULE_TOPIC_XXXX) and %DLQ%group."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.message import MessageRecord, decode_record
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.broker.harness import Harness, running_broker

SCHEDULE = "SCHEDULE_TOPIC_XXXX"


async def send_back(h: Harness, offset: int, group: str = "cg", delay: int = 0, **extra: Any) -> Any:
    header = {"offset": offset, "group": group, "delayLevel": delay, "unitMode": "false", **extra}
    return await h.call(RequestCode.CONSUMER_SEND_MSG_BACK, header)


async def sent_offset(h: Harness, topic: str, **kw: Any) -> tuple[int, str]:
    """(commit-log offset, offset message id) of a freshly sent message."""
    resp = await h.send(topic, **kw)
    msg_id = resp.ext_fields["msgId"]
    return decode_offset_msg_id(msg_id)[1], msg_id


def stored(h: Harness, topic: str, queue_id: int) -> list[MessageRecord]:
    result = h.app.broker.store.get_message(topic, queue_id, 0, 32)
    return [decode_record(m) for m in result.messages]


def test_send_back_to_retry_goes_through_the_schedule_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            offset, msg_id = await sent_offset(h, "Orig", body=b"payload", props={"KEYS": "k1"})
            resp = await send_back(h, offset, originMsgId="U" * 32, originTopic="Orig", maxReconsumeTimes=16)
            assert resp.code == ResponseCode.SUCCESS, resp
            await h.dispatched()

            # delayLevel 0 -> 3 + reconsumeTimes(0) = level 3 -> schedule queue 2.
            [copy] = stored(h, SCHEDULE, 2)
            assert copy.body == b"payload"
            assert copy.reconsume_times == 1
            props = copy.properties
            assert props[P.REAL_TOPIC] == "%RETRY%cg"
            assert props[P.REAL_QID] == "0"
            assert props[P.DELAY] == "3"
            assert props[P.RETRY_TOPIC] == "Orig"
            assert props[P.ORIGIN_MESSAGE_ID] == msg_id
            assert props[P.WAIT] == "false"
            assert props["KEYS"] == "k1" and props["TAGS"] == "TagA"
            original = decode_record(h.app.broker.store.look_message_by_offset(offset) or b"")
            assert (copy.born_timestamp, copy.born_host) == (original.born_timestamp, original.born_host)
            assert copy.store_host == original.store_host

            topics = h.app.broker.topics
            retry = topics.get("%RETRY%cg")
            assert retry is not None and (retry.read_queue_nums, retry.perm) == (1, 6)
            # Level 3 is 10 s away: nothing has reached the retry queue itself yet.
            assert await h.pull("cg", "%RETRY%cg") == []

            # Sent back again (from its scheduled copy): the first topic and id stay, level 3 + 1.
            resp = await send_back(h, copy.physical_offset)
            assert resp.code == ResponseCode.SUCCESS
            await h.dispatched()
            [again] = stored(h, SCHEDULE, 3)
            assert again.reconsume_times == 2
            assert again.properties[P.RETRY_TOPIC] == "Orig"
            assert again.properties[P.ORIGIN_MESSAGE_ID] == msg_id
            assert again.properties[P.DELAY] == "4"

            # An explicit delay level is used as given.
            resp = await send_back(h, offset, delay=7)
            assert resp.code == ResponseCode.SUCCESS
            await h.dispatched()
            assert len(stored(h, SCHEDULE, 6)) == 1

    asyncio.run(main())


def test_send_back_to_dlq(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            # reconsumeTimes 3 >= maxReconsumeTimes 3 -> DLQ.
            offset, msg_id = await sent_offset(h, "Orig", body=b"tired", reconsume_times=3)
            resp = await send_back(h, offset, maxReconsumeTimes=3)
            assert resp.code == ResponseCode.SUCCESS, resp
            await h.dispatched()
            [dead] = await h.pull("cg", "%DLQ%cg")
            assert dead.topic == "%DLQ%cg" and dead.queue_id == 0
            assert dead.body == b"tired"
            assert dead.reconsume_times == 4
            assert dead.properties[P.DELAY] == "0"
            assert dead.properties[P.RETRY_TOPIC] == "Orig"
            assert dead.properties[P.ORIGIN_MESSAGE_ID] == msg_id
            assert P.REAL_TOPIC not in dead.properties
            dlq = h.app.broker.topics.get("%DLQ%cg")
            assert dlq is not None and (dlq.write_queue_nums, dlq.perm) == (1, 6)

            # A negative delay level means "straight to the DLQ".
            offset2, _ = await sent_offset(h, "Orig", body=b"poison")
            assert (await send_back(h, offset2, delay=-1)).code == ResponseCode.SUCCESS
            await h.dispatched()
            bodies = [m.body for m in await h.pull("cg", "%DLQ%cg")]
            assert bodies == [b"tired", b"poison"]

            # Without maxReconsumeTimes in the header the group's retryMaxTimes decides.
            group = fastjson.dumps({"groupName": "g2", "retryMaxTimes": 2})
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group)).code == 0
            offset3, _ = await sent_offset(h, "Orig", body=b"third", reconsume_times=2)
            assert (await send_back(h, offset3, group="g2")).code == ResponseCode.SUCCESS
            await h.dispatched()
            assert [m.body for m in await h.pull("g2", "%DLQ%g2")] == [b"third"]

    asyncio.run(main())


def test_send_back_errors(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, auto_create_subscription_group=False) as h:
            offset, _ = await sent_offset(h, "Orig")
            resp = await send_back(h, offset, group="unknown")
            assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert "unknown" in (resp.remark or "")

            group = fastjson.dumps({"groupName": "cg"})
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group)).code == 0
            resp = await send_back(h, 10**9)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.remark == f"look message by offset failed, {10**9}"
            resp = await h.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "cg", "delayLevel": 0})
            assert resp.code == ResponseCode.SYSTEM_ERROR and "offset" in (resp.remark or "")

            # A group without retry queues: SUCCESS and nothing is written.
            group = fastjson.dumps({"groupName": "noretry", "retryQueueNums": 0})
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group)).code == 0
            before = h.app.broker.store.max_phy_offset
            assert (await send_back(h, offset, group="noretry")).code == ResponseCode.SUCCESS
            assert h.app.broker.store.max_phy_offset == before
            assert h.app.broker.topics.get("%RETRY%noretry") is None

            # A retry topic made read-only refuses send-backs.
            header = {
                "topic": "%RETRY%cg",
                "defaultTopic": "TBW102",
                "readQueueNums": 1,
                "writeQueueNums": 1,
                "perm": 4,
                "topicFilterType": "SINGLE_TAG",
                "order": "false",
            }
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == 0
            resp = await send_back(h, offset)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert resp.remark == "the topic[%RETRY%cg] sending message is forbidden"

    asyncio.run(main())


def test_send_back_refused_by_a_read_only_broker(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, broker_permission=4) as h:
            resp = await send_back(h, 0)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert resp.remark == "the broker[127.0.0.1] sending message is forbidden"

    asyncio.run(main())
