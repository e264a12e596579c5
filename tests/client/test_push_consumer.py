"""The push consumer against an in-process name server and brokers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client.consumer.common import ConsumeFromWhere, MessageModel, dlq_topic, retry_topic
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, loads_lenient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import encode_record
from tests.client.cluster import running
from tests.client.consumer_cluster import FAST_DELAYS, Collector, aio, consumer, send_many, wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def assigned(c: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in c.rebalance_impl.process_queue_table if mq.topic == topic}


@aio(80)
async def test_clustering_members_split_the_queues_and_see_each_message_once(tmp_path: Path) -> None:
    topic = "SplitTopic"
    async with running(tmp_path, ("broker-a", "broker-b")) as cl, Producer("pg", cl.ns_addr) as producer:
        phase1 = await send_many(producer, topic, 40, prefix="p1")  # creates the topic: 4 queues per broker
        col = Collector()
        a = consumer("cg-split", cl.ns_addr, consume_from_where=FIRST)
        a.subscribe(topic)
        a.register_listener(col.listener("a"))
        await a.start()
        b = consumer("cg-split", cl.ns_addr, consume_from_where=FIRST)
        b.subscribe(topic)
        b.register_listener(col.listener("b"))
        try:
            await col.wait_ids(phase1, "a")
            await wait_until("a owning all 8 queues", lambda: len(assigned(a, topic)) == 8)
            await asyncio.sleep(0.5)  # two persist rounds: a's offsets are on the brokers

            await b.start()  # b joins: the 8 queues are split 4 / 4
            await wait_until(
                "the split", lambda: len(assigned(a, topic)) == 4 and len(assigned(b, topic)) == 4, timeout=15
            )
            assert assigned(a, topic).isdisjoint(assigned(b, topic))
            phase2 = await send_many(producer, topic, 40, prefix="p2")
            await col.wait_ids(phase2)
            assert set(col.ids("a")) & phase2 and set(col.ids("b")) & phase2  # both took a share

            await asyncio.sleep(0.5)
            await a.shutdown()  # a leaves: b takes everything
            await wait_until("b owning all 8 queues", lambda: len(assigned(b, topic)) == 8, timeout=15)
            phase3 = await send_many(producer, topic, 40, prefix="p3")
            await col.wait_ids(phase3, "b")
        finally:
            await a.shutdown()
            await b.shutdown()
        counts = col.ids()
        assert set(counts) == phase1 | phase2 | phase3
        assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
        # the listener saw the user's topic, and the queues' owners were the ones delivering
        assert {s.topic for s in col.seen} == {topic}
        assert {s.broker_name for s in col.seen} == {"broker-a", "broker-b"}


@aio(60)
async def test_broadcasting_every_member_gets_everything_and_tags_filter(tmp_path: Path) -> None:
    topic = "BcastTopic"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        col = Collector()
        members = []
        for name in ("x", "y"):
            c = consumer(
                "cg-bcast",
                cl.ns_addr,
                message_model=MessageModel.BROADCASTING,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                instance_name=f"bcast-{name}",
                offset_store_dir=str(tmp_path / "offsets"),
            )
            c.subscribe(topic, "TagA || TagB")
            c.register_listener(col.listener(name, ConsumeConcurrentlyStatus.RECONSUME_LATER))
            members.append(c)
        try:
            for c in members:
                await c.start()
            for c in members:
                await wait_until("all queues", lambda c=c: len(assigned(c, topic)) == 4)
            assert retry_topic("cg-bcast") not in members[0].subscriptions  # no retry topic for broadcasting
            wanted = await send_many(producer, topic, 10, tags="TagA", prefix="a")
            wanted |= await send_many(producer, topic, 10, tags="TagB", prefix="b")
            unwanted = await send_many(producer, topic, 10, tags="TagC", prefix="c")
            await col.wait_ids(wanted, "x")
            await col.wait_ids(wanted, "y")
            for c in members:  # the filtered-out tail moves the offsets too
                await wait_until(
                    "offsets past every message",
                    lambda c=c: sum(c.offset_store.clone_offset_table(topic).values()) == 31,
                )
            # failed (RECONSUME_LATER) broadcasting messages are dropped, not retried
            assert max(col.ids().values()) == 2
            assert not set(col.ids()) & unwanted
            assert {s.tags for s in col.seen} == {"TagA", "TagB"}
        finally:
            for c in members:
                await c.shutdown()
        # progress was written to the local files
        files = sorted((tmp_path / "offsets").rglob("offsets.json"))
        assert len(files) == 2
        table = loads_lenient(files[0].read_bytes())["offsetTable"]
        assert sum(int(v) for v in table.values()) >= 31


@aio(60)
async def test_failed_messages_come_back_from_retry_then_go_to_the_dlq(tmp_path: Path) -> None:
    topic = "RetryTopic"
    group = "cg-retry"
    async with running(tmp_path, message_delay_level=FAST_DELAYS) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        col = Collector()
        c = consumer(group, cl.ns_addr, max_reconsume_times=2)
        c.subscribe(topic)

        def answer(msgs: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
            if msgs[0].body.startswith(b"bad"):
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c.register_listener(col.listener("c", answer))
        try:
            await c.start()
            await wait_until("the topic's queues", lambda: len(assigned(c, topic)) == 4)
            bad = (await producer.send(Message(topic, b"bad-1", tags="T"))).msg_id
            good = (await producer.send(Message(topic, b"good-1"))).msg_id
            await col.wait_ids({good})
            await wait_until("three deliveries of the bad message", lambda: col.ids()[bad] >= 3, timeout=25)
            seen = [s for s in col.seen if s.msg_id == bad]
            assert [s.reconsume_times for s in seen] == [0, 1, 2]
            assert {s.topic for s in seen} == {topic}  # the retry topic is hidden from the listener
            assert {s.tags for s in seen} == {"T"}

            async def in_dlq() -> bool:
                records = await cl.pull("broker-a", dlq_topic(group), 0)
                return any(r.msg_id == bad for r in records)

            deadline = time.monotonic() + 10
            while not await in_dlq():
                assert time.monotonic() < deadline, "the message never reached the DLQ"
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)
            assert col.ids()[bad] == 3 and col.ids()[good] == 1
        finally:
            await c.shutdown()


@aio(60)
async def test_offsets_survive_a_restart(tmp_path: Path) -> None:
    topic = "ResumeTopic"
    group = "cg-resume"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        first = await send_many(producer, topic, 30, prefix="first")
        col = Collector()
        c1 = consumer(group, cl.ns_addr, consume_from_where=FIRST)
        c1.subscribe(topic)
        c1.register_listener(col.listener("c1"))
        async with c1:
            await col.wait_ids(first, "c1")
        second = await send_many(producer, topic, 30, prefix="second")
        c2 = consumer(group, cl.ns_addr, consume_from_where=FIRST)
        c2.subscribe(topic)
        c2.register_listener(col.listener("c2"))
        async with c2:
            await col.wait_ids(second, "c2")
            await asyncio.sleep(0.5)
        assert set(col.ids("c2")) == second  # nothing acknowledged before the restart came again
        assert max(col.ids().values()) == 1


@aio(60)
async def test_orderly_consumption_keeps_queue_order_and_holds_the_locks(tmp_path: Path) -> None:
    topic = "OrderTopic"
    group = "cg-order"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        queues = await producer.fetch_publish_queues(topic)
        order: dict[int, list[int]] = {}
        suspended: set[int] = set()

        from ledgermq.client.push.consume_service import ConsumeOrderlyStatus

        async def listener(msgs: list[Any], context: Any) -> ConsumeOrderlyStatus:
            # "create" has no sequence: a young queue is read from 0 even from LAST_OFFSET (Java's broker too)
            batch = [tuple(int(x) for x in m.body.split(b":")) for m in msgs if b":" in m.body]
            for qid, seq in batch:
                if seq == 5 and qid not in suspended:  # fail once: the same messages must come again first
                    suspended.add(qid)
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            for qid, seq in batch:
                order.setdefault(qid, []).append(seq)
            await asyncio.sleep(0)
            return ConsumeOrderlyStatus.SUCCESS

        c = consumer(group, cl.ns_addr, suspend_current_queue_time_millis=50, consume_message_batch_max_size=2)
        c.subscribe(topic)
        c.register_orderly_listener(listener)
        try:
            await c.start()
            await wait_until("locked queues", lambda: len(assigned(c, topic)) == 4)
            n = 30
            for seq in range(n):
                for q in queues:
                    await producer.send_to_queue(Message(topic, f"{q.queue_id}:{seq}".encode()), q)
            await wait_until("all ordered messages", lambda: sum(len(v) for v in order.values()) == n * 4)
            assert all(order[q.queue_id] == list(range(n)) for q in queues), order
            assert suspended == {q.queue_id for q in queues}
            pqs = c.rebalance_impl.process_queue_table
            assert all(pq.locked for mq, pq in pqs.items() if mq.topic == topic)
            # another client cannot take the locks
            probe = c.pull_api
            got = await probe.lock_batch("broker-a", topic, group, "10.9.9.9@probe", set(assigned(c, topic)))
            assert got == set()
        finally:
            await c.shutdown()
        # shutdown released them
        from ledgermq.client.instance.client_instance import ClientInstance

        inst = ClientInstance.acquire(cl.ns_addr, instance_name="probe")
        try:
            await inst.start()
            got = await inst.pull_api.lock_batch("broker-a", topic, group, "10.9.9.9@probe", set(queues))
            assert got == set(queues)
        finally:
            await inst.release()


@aio(60)
async def test_flow_control_stops_pulling_when_the_cache_is_full(tmp_path: Path) -> None:
    topic = "FlowTopic"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create"))
        q0 = (await producer.fetch_publish_queues(topic))[0]
        gate = asyncio.Event()
        consumed: list[bytes] = []

        async def slow(msgs: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
            await gate.wait()
            consumed.extend(m.body for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = consumer("cg-flow", cl.ns_addr, pull_threshold_for_queue=5, pull_batch_size=4, consume_from_where=FIRST)
        c.subscribe(topic)
        c.register_listener(slow)
        try:
            await c.start()
            for i in range(60):
                await producer.send_to_queue(Message(topic, f"f{i}".encode()), q0)
            mq = MessageQueue(topic, "broker-a", q0.queue_id)
            await wait_until("the queue assigned", lambda: mq in c.rebalance_impl.process_queue_table)
            pq = c.rebalance_impl.process_queue_table[mq]
            await wait_until("a full cache", lambda: pq.msg_count > 5)
            await asyncio.sleep(0.5)
            assert 5 < pq.msg_count <= 5 + 4  # one batch over the threshold, then no more pulls
            gate.set()
            await wait_until("everything consumed", lambda: len(consumed) == 61)
        finally:
            gate.set()
            await c.shutdown()


@aio(60)
async def test_broker_requests_running_info_status_reset_and_direct(tmp_path: Path) -> None:
    topic = "AdminTopic"
    group = "cg-admin"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        ids = await send_many(producer, topic, 12)
        col = Collector()
        c = consumer(group, cl.ns_addr, consume_from_where=FIRST)
        c.subscribe(topic)
        c.register_listener(col.listener("c"))
        try:
            await c.start()
            await col.wait_ids(ids)
            await wait_until(
                "offsets in memory",
                lambda: sum(v for mq, v in c.offset_store.clone_offset_table(topic).items()) == 12,
            )
            info = loads_lenient(fastjson.dumps(c.running_info()))  # fastjson: queue objects as keys
            assert info["properties"]["PROP_CONSUMEORDERLY"] == "false"
            assert {s["topic"] for s in info["subscriptionSet"]} == {topic, retry_topic(group)}
            assert len(info["mqTable"]) >= 4 and topic in info["statusTable"]

            status = await c.handle_broker_request(
                RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group})
            )
            assert status is not None and status.code == ResponseCode.SUCCESS
            table = loads_lenient(status.body)["messageQueueTable"]
            assert sum(int(v) for v in table.values()) == 12

            # reset every queue to 0: everything is consumed a second time
            offsets = dict.fromkeys(assigned(c, topic), 0)
            from ledgermq.protocol.admin_body import mq_table

            body = fastjson.dumps({"offsetTable": mq_table(offsets)})
            reset = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": topic, "group": group, "timestamp": 0, "isForce": True},
                body,
            )
            answer = await c.handle_broker_request(reset)
            assert answer is not None and answer.code == ResponseCode.SUCCESS
            await wait_until("a second delivery of each", lambda: all(col.ids()[i] == 2 for i in ids))

            raw = bytes(encode_record(topic=topic, body=b"direct", properties="", queue_id=1))
            direct = await c.handle_broker_request(
                RemotingCommand.request(
                    RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": group, "brokerName": "broker-a"}, raw
                )
            )
            assert direct is not None and direct.code == ResponseCode.SUCCESS
            doc = fastjson.loads(direct.body)
            assert doc["consumeResult"] == "CR_SUCCESS" and doc["order"] is False
            assert col.seen[-1].body == b"direct"
        finally:
            await c.shutdown()


@aio(60)
async def test_listeners_that_wait_run_at_most_consume_thread_max_at_once(tmp_path: Path) -> None:
    """The consume pool's tasks are what bounds concurrent ``async def`` listeners (as Java's
    consume threads do): no more than ``consume_thread_max`` are inside one at a time, and
    that many are reached while they wait."""
    topic = "BoundTopic"
    async with running(tmp_path, ("broker-a",)) as cl, Producer("pg", cl.ns_addr) as producer:
        ids = await send_many(producer, topic, 60)
        inside, peak, seen = 0, 0, 0

        async def listener(msgs: list[Any], _context: object) -> ConsumeConcurrentlyStatus:
            nonlocal inside, peak, seen
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.05)
            inside -= 1
            seen += len(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = consumer("cg-bound", cl.ns_addr, consume_from_where=FIRST, consume_thread_min=3, consume_thread_max=3)
        c.subscribe(topic)
        c.register_listener(listener)
        await c.start()
        try:
            await wait_until("every message consumed", lambda: seen >= len(ids), timeout=30)
        finally:
            await c.shutdown()
        assert peak == 3


def test_configuration_is_checked() -> None:
    with pytest.raises(MQClientError):
        PushConsumer("", "127.0.0.1:9876")
    with pytest.raises(MQClientError):
        PushConsumer("DEFAULT_CONSUMER", "127.0.0.1:9876")
    # Validators.checkGroup: the topic character set and at most 255 characters, as the lite consumer
    for bad in ("bad group", "group/1", "g" * 256, "组"):
        with pytest.raises(MQClientError, match=r"illegal characters|longer than 255"):
            PushConsumer(bad, "127.0.0.1:9876")
    assert PushConsumer(" %RETRY%ok-group_1| ", "127.0.0.1:9876").group == "%RETRY%ok-group_1|"  # blanks trimmed
    with pytest.raises(MQClientError):
        PushConsumer("g", "127.0.0.1:9876", consume_thread_min=30, consume_thread_max=20)
    with pytest.raises(MQClientError):
        PushConsumer("g", "127.0.0.1:9876", consume_timestamp="yesterday")
    c = PushConsumer("g", "127.0.0.1:9876")
    with pytest.raises(ClientStateError):
        _ = c.offset_store

    async def no_listener() -> None:
        with pytest.raises(MQClientError):
            await c.start()

    asyncio.run(no_listener())
    data = c.consumer_data()
    assert data["consumeType"] == "CONSUME_PASSIVELY" and data["messageModel"] == "CLUSTERING"
