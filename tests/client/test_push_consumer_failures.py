"""Push consumer failure paths against in-process brokers: send-back fallbacks, local
re-consumption, the orderly DLQ path, an illegal offset, listeners that raise."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from ledgermq.client.consumer.common import ConsumeFromWhere, dlq_topic
from ledgermq.client.errors import MQConnectError
from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from tests.admin.servers import commit_offset
from tests.client.cluster import Cluster, running
from tests.client.consumer_cluster import FAST_DELAYS, Collector, aio, consumer, send_many, wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


async def in_dlq(cl: Cluster, group: str, msg_id: str, timeout: float = 10.0) -> MessageRecord:
    deadline = time.monotonic() + timeout
    while True:
        for r in await cl.pull("broker-a", dlq_topic(group), 0):
            if r.msg_id == msg_id:
                return r
        assert time.monotonic() < deadline, f"{msg_id} never reached the DLQ of {group}"
        await asyncio.sleep(0.1)


@aio(60)
async def test_send_back_falls_back_to_the_producer_then_to_local_reconsumption(tmp_path: Path) -> None:
    topic = "FallbackTopic"
    async with running(tmp_path, message_delay_level=FAST_DELAYS) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        col = Collector()
        attempts: dict[str, int] = {}

        def answer(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
            key = msgs[0].body.decode()
            attempts[key] = attempts.get(key, 0) + 1
            if key.startswith("bad") and attempts[key] <= 2:
                raise RuntimeError("listener failure")  # an exception counts as RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = consumer("cg-fallback", cl.ns_addr)
        c.subscribe(topic)
        c.register_listener(col.listener("c", answer))
        try:
            await c.start()
            await wait_until(
                "queues", lambda: len([q for q in c.rebalance_impl.process_queue_table if q.topic == topic]) == 4
            )

            async def broker_refuses(*args: Any, **kwargs: Any) -> None:
                raise MQConnectError("send back refused in this test", "127.0.0.1:1")

            c.pull_api.send_back = broker_refuses  # type: ignore[method-assign]
            producer_down = True
            real_inner = c.inner_producer

            async def inner() -> Producer:
                if producer_down:
                    raise MQConnectError("inner producer down in this test", "127.0.0.1:1")
                return await real_inner()

            c.inner_producer = inner  # type: ignore[method-assign]
            bad = (await producer.send(Message(topic, b"bad-1", tags="X"))).msg_id
            # 1st failure: broker and producer both refuse -> consumed again locally, reconsume_times + 1
            await wait_until("a local re-consumption", lambda: col.ids()[bad] >= 2)
            local = [s for s in col.seen if s.msg_id == bad]
            assert [s.reconsume_times for s in local[:2]] == [0, 1]
            assert local[1].topic == topic
            producer_down = False
            # (the 2nd delivery failed as well; its copy went through the producer to %RETRY%)
            await wait_until("the copy from the retry topic", lambda: col.ids()[bad] >= 3, timeout=15)
            third = [s for s in col.seen if s.msg_id == bad][2]
            assert third.topic == topic and third.tags == "X" and third.reconsume_times == 2
            await asyncio.sleep(0.5)
            assert col.ids()[bad] == 3
        finally:
            await c.shutdown()


@aio(60)
async def test_orderly_messages_beyond_max_reconsume_times_go_to_the_dlq(tmp_path: Path) -> None:
    topic = "OrderDlqTopic"
    group = "cg-order-dlq"
    async with running(tmp_path, message_delay_level=FAST_DELAYS) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        q0 = (await producer.fetch_publish_queues(topic))[0]
        seen: list[tuple[bytes, int]] = []

        def listener(msgs: list[MessageRecord], context: Any) -> ConsumeOrderlyStatus:  # runs in the pool
            assert threading.current_thread() is not threading.main_thread()
            seen.extend((m.body, m.reconsume_times) for m in msgs)
            if msgs[0].body == b"poison":
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        c = consumer(group, cl.ns_addr, max_reconsume_times=2, suspend_current_queue_time_millis=20)
        c.subscribe(topic)
        c.register_orderly_listener(listener)
        try:
            await c.start()
            await wait_until(
                "queues", lambda: MessageQueue(topic, "broker-a", q0.queue_id) in c.rebalance_impl.process_queue_table
            )
            poison = (await producer.send_to_queue(Message(topic, b"poison"), q0)).msg_id
            await producer.send_to_queue(Message(topic, b"after"), q0)
            await wait_until("the message after the poison", lambda: (b"after", 0) in seen)
            assert [r for b, r in seen if b == b"poison"] == [0, 1, 2]  # then it left for the DLQ
            assert seen.index((b"after", 0)) > seen.index((b"poison", 2))  # order kept
            dead = await in_dlq(cl, group, poison)
            assert dead.body == b"poison"
        finally:
            await c.shutdown()


@aio(60)
async def test_an_illegal_offset_is_fixed_and_the_queue_readded(tmp_path: Path) -> None:
    topic = "IllegalTopic"
    group = "cg-illegal"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        before = await send_many(producer, topic, 8, prefix="before")
        deadline = time.monotonic() + 10
        while sum([len(await cl.pull("broker-a", topic, q)) for q in range(4)]) < 8:  # dispatched to the queues
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        for qid in range(4):  # a stored offset far past the end of every queue
            await commit_offset(cl.addr("broker-a"), group, topic, qid, 1000)
        col = Collector()
        c = consumer(group, cl.ns_addr, consume_from_where=FIRST)
        c.subscribe(topic)
        c.register_listener(col.listener("c"))
        try:
            await c.start()

            def fixed() -> bool:
                table = c.rebalance_impl.process_queue_table
                offsets = c.offset_store.clone_offset_table(topic)
                mine = [mq for mq in table if mq.topic == topic]
                return len(mine) == 4 and all(offsets.get(mq, 1000) < 1000 for mq in mine)

            await wait_until("the queues re-added at their max offsets", fixed)
            after = await send_many(producer, topic, 8, prefix="after")
            await col.wait_ids(after)
            assert not set(col.ids()) & before  # restarted at the end, as the broker corrected
        finally:
            await c.shutdown()


@aio(60)
async def test_concurrent_first_send_backs_share_one_inner_producer_and_shutdown_releases_it(tmp_path: Path) -> None:
    # Several batches failing at once all ask for the inner producer before the first one
    # has started it; each call used to take a reference, shutdown gave back one, and the
    # producer (and with it the client instance and its loops) stayed up for good.
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message("InnerTopic", b"create"))
        c = consumer("cg-inner", cl.ns_addr)
        c.subscribe("InnerTopic")
        c.register_listener(Collector().listener("c"))
        await c.start()
        instance = c.instance
        try:
            first, second, third = await asyncio.gather(c.inner_producer(), c.inner_producer(), c.inner_producer())
            assert first is second is third
        finally:
            async with asyncio.timeout(10):  # a rebalance round is still in flight: its cancel must not be lost
                await c.shutdown()
        assert not instance.running  # the last user left: the instance and its loops stopped
        assert first._state == "shut down"


@aio(60)
async def test_an_ack_index_inside_the_batch_sends_the_rest_back(tmp_path: Path) -> None:
    """``context.ack_index`` on CONSUME_SUCCESS: the messages after it failed and come back
    (through the retry topic), the ones up to it are done; a batch answered in full is done."""
    topic = "AckIndexTopic"
    async with running(tmp_path, message_delay_level=FAST_DELAYS) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        col = Collector()
        batches: list[list[bytes]] = []

        def answer(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
            bodies = [m.body for m in msgs]
            batches.append(bodies)
            if bodies == [b"p-0", b"p-1", b"p-2"]:
                context.ack_index = 0  # p-1 and p-2 failed
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = consumer("cg-ack-index", cl.ns_addr, consume_message_batch_max_size=8)
        c.subscribe(topic)
        c.register_listener(col.listener("c", answer))
        try:
            await c.start()
            await wait_until("the first message", lambda: any(b"create" in b for b in batches))
            sent = await producer.send_batch([Message(topic, f"p-{i}".encode()) for i in range(3)])
            ids = sent.msg_id.split(",")
            await wait_until("p-1 and p-2 again", lambda: col.ids()[ids[1]] >= 2 and col.ids()[ids[2]] >= 2, timeout=20)
            again = [s for s in col.seen if s.msg_id in ids and s.reconsume_times == 1]
            assert sorted(s.body for s in again) == [b"p-1", b"p-2"]
            await asyncio.sleep(1.5)  # nothing else comes back: p-0 was done, and so were the retries
            assert col.ids()[ids[0]] == 1 and col.ids()[ids[1]] == 2 and col.ids()[ids[2]] == 2
        finally:
            await c.shutdown()
