"""DLedger mode, the broker's own writes, with real processes (a name server and a 3-broker
Raft group, as in test_dledger_process.py): delayed messages and consumer retries.

A delayed message is proposed into SCHEDULE_TOPIC_XXXX on every node; the leader's
schedule service proposes it to its real topic once due. One stored before the leader is
SIGKILLed is delivered by the next leader. A message a consumer fails comes back through
%RETRY%group by CONSUMER_SEND_MSG_BACK on the leader (not the client's fallback send), and
goes to %DLQ%group past maxReconsumeTimes; a follower refuses a send-back and keeps the
leader's delay offsets. Delay levels are short here (level 1 = 1 s, level 2 = 3 s, the
rest 1 s).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer
from ledgermq.client.message import SendStatus
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.client.consumer_cluster import FAST
from tests.ha.dledger_group import QUEUES, TOPIC, DLedgerGroup

DELAYS = "1s 3s " + " ".join(["1s"] * 16)  # level 2 = 3 s: still waiting when its leader dies
CG = "dl-cg"


def delay_group(root: Path) -> DLedgerGroup:
    group = DLedgerGroup(root)
    for n in group.ids:
        with (root / f"{n}.conf").open("a") as conf:
            conf.write(f"messageDelayLevel={DELAYS}\n")
    return group


class Seen:
    """What the consumer saw: (body, reconsumeTimes, monotonic time) per delivery."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[bytes, int, float]] = []

    async def listener(self, msgs: list[MessageRecord], _context: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            self.deliveries.append((m.body, m.reconsume_times, time.monotonic()))
        if any(m.body == b"fail-once" and m.reconsume_times == 0 for m in msgs):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def of(self, body: bytes) -> list[tuple[int, float]]:
        return [(times, at) for b, times, at in self.deliveries if b == body]

    async def wait_for(self, body: bytes, count: int, timeout: float) -> list[tuple[int, float]]:
        deadline = time.monotonic() + timeout
        while len(self.of(body)) < count:
            assert time.monotonic() < deadline, f"{body!r}: {len(self.of(body))} of {count} deliveries"
            await asyncio.sleep(0.05)
        return self.of(body)


async def started_consumer(group: DLedgerGroup, seen: Seen) -> PushConsumer:
    consumer = PushConsumer(CG, group.namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            client_ip="127.0.0.1", **FAST)  # fmt: skip
    consumer.subscribe(TOPIC)
    consumer.register_listener(seen.listener)
    await consumer.start()
    deadline = time.monotonic() + 15
    while sum(mq.topic == TOPIC for mq in consumer.rebalance_impl.process_queue_table) < QUEUES:
        assert time.monotonic() < deadline, "the consumer never got the topic's queues"
        await asyncio.sleep(0.05)
    return consumer


async def wait_topic_everywhere(group: DLedgerGroup) -> None:
    """Topic configs reach followers by their slave sync, not by Raft: a test that kills the
    leader waits until every node knows the topic (as an operator would create it first)."""

    async def known(admin: AdminClient, n: str) -> bool:
        try:
            return len(await admin.topic_stats(group.addr(n), TOPIC)) == QUEUES
        except Exception:
            return False

    deadline = time.monotonic() + 15
    async with AdminClient(group.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
        for n in group.ids:
            while not await known(admin, n):
                assert time.monotonic() < deadline, f"{n} never learned topic {TOPIC}"
                await asyncio.sleep(0.1)


async def send_ok(producer: Producer, msg: Message) -> tuple[int, float]:
    """(commit-log offset, time sent) of a message the group acknowledged."""
    at = time.monotonic()
    result = await producer.send(msg)
    assert result.status is SendStatus.SEND_OK, result
    return decode_offset_msg_id(result.offset_msg_id)[1], at


async def send_back(addr: str, offset: int, **extra: object) -> RemotingCommand:
    header = {"offset": offset, "group": CG, "delayLevel": 0, "unitMode": "false", **extra}
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header), 5.0)
    finally:
        await client.close()


async def delay_offsets(addr: str) -> dict[int, int]:
    client = RemotingClient()
    try:
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET), 5.0)
    finally:
        await client.close()
    assert resp.code == ResponseCode.SUCCESS, resp
    return {int(k): int(v) for k, v in (fastjson.loads(resp.body).get("offsetTable") or {}).items()}


async def dlq_size(addr: str, namesrv: str) -> int:
    async with AdminClient(namesrv, timeout=3.0, connect_timeout=1.0) as admin:
        stats = await admin.topic_stats(addr, f"%DLQ%{CG}")
    return sum(o.max_offset for o in stats.values())


def test_delayed_messages_and_consumer_retries_go_through_the_raft_group(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    group = delay_group(tmp_path)
    caplog.set_level(logging.ERROR, logger="ledgermq.client.push.consume_service")
    try:
        group.start()
        leader = group.master()
        assert leader is not None
        follower = next(n for n in group.ids if n != leader)

        async def run() -> None:
            seen = Seen()
            async with Producer("dl-pg", group.namesrv_addr, send_timeout=3.0) as producer:
                await send_ok(producer, Message(TOPIC, b"create"))
                consumer = await started_consumer(group, seen)
                try:
                    # Level 1 (1 s): stored under SCHEDULE_TOPIC_XXXX, delivered by the leader when due.
                    _, sent_at = await send_ok(producer, Message(TOPIC, b"delayed", delay_level=1))
                    [(_, got_at)] = await seen.wait_for(b"delayed", 1, 10)
                    assert got_at - sent_at >= 0.9, f"delivered {got_at - sent_at:.2f}s after the send"

                    # A failed message comes back through %RETRY% (level 3 + 0 = 1 s here).
                    await send_ok(producer, Message(TOPIC, b"fail-once"))
                    again = await seen.wait_for(b"fail-once", 2, 15)
                    assert [t for t, _ in again] == [0, 1]
                    assert again[1][1] - again[0][1] >= 0.9
                    assert not [r for r in caplog.records if "sending back" in r.getMessage()], caplog.text

                    # Past maxReconsumeTimes: %DLQ%; a follower writes nothing.
                    offset, _ = await send_ok(producer, Message(TOPIC, b"to-dlq"))
                    refused = await send_back(group.addr(follower), offset, maxReconsumeTimes=0)
                    assert refused.code == ResponseCode.SYSTEM_ERROR, refused
                    answer = await send_back(group.addr(leader), offset, maxReconsumeTimes=0)
                    assert answer.code == ResponseCode.SUCCESS, answer
                    deadline = time.monotonic() + 5  # committed; dispatched to the consume queue just after
                    while await dlq_size(group.addr(leader), group.namesrv_addr) < 1:
                        assert time.monotonic() < deadline, "the DLQ copy never reached %DLQ%"
                        await asyncio.sleep(0.05)
                    assert await dlq_size(group.addr(leader), group.namesrv_addr) == 1

                    # Followers keep the leader's delay offsets (level 1: "delayed", level 3: the retry).
                    deadline = time.monotonic() + 8
                    while (table := await delay_offsets(group.addr(follower))) != {1: 1, 3: 1}:
                        assert time.monotonic() < deadline, f"{follower}'s delay offsets: {table}"
                        await asyncio.sleep(0.1)
                finally:
                    await consumer.shutdown()

        asyncio.run(asyncio.wait_for(run(), 45))
    finally:
        group.close()


def test_a_delayed_message_stored_before_the_leader_dies_is_delivered_by_the_next_leader(tmp_path: Path) -> None:
    group = delay_group(tmp_path)
    report: dict[str, object] = {}
    try:
        group.start()
        first = group.master()
        assert first is not None

        async def run() -> None:
            seen = Seen()
            async with Producer("dl-pg", group.namesrv_addr, send_timeout=3.0) as producer:
                await send_ok(producer, Message(TOPIC, b"create"))
                consumer = await started_consumer(group, seen)
                await wait_topic_everywhere(group)
                try:
                    # Level 2 (3 s): committed on a quorum, not yet due when its leader is killed.
                    _, sent_at = await send_ok(producer, Message(TOPIC, b"outlives-its-leader", delay_level=2))
                    group.brokers[first].kill()
                    killed_at = time.monotonic()
                    assert killed_at - sent_at < 2.5, "too slow to kill the leader before the message was due"
                    [(_, got_at)] = await seen.wait_for(b"outlives-its-leader", 1, 20)
                    report["kill -> delivery s"] = round(got_at - killed_at, 2)
                    report["send -> delivery s"] = round(got_at - sent_at, 2)
                    assert got_at - sent_at >= 2.9
                    await asyncio.sleep(1.5)  # and only once: nothing else was due
                    assert len(seen.of(b"outlives-its-leader")) == 1
                finally:
                    await consumer.shutdown()

        asyncio.run(asyncio.wait_for(run(), 45))
        second = group.master()
        report["leaders"] = (first, second)
        assert second is not None and second != first
    finally:
        group.close()
    print(f"\nDLedger delayed delivery across a failover: {report}")
