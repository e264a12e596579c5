"""Our pure-Python client against the Apache RocketMQ C++ client, both directions, through one broker process.

* our ``Producer`` sends; the C++ push consumer must see every message exactly as sent (body bytes, tags, keys,
  user properties, unicode, a 1-byte and a 4 MiB body, compressed and plain);
* the C++ producer sends; our consumers must see the same (and what the C++ client alone allows: an empty body is
  refused by both clients' validation, so it is checked to be refused rather than silently dropped).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster
from tests.compat.test_cpp_client import UID, USER_PROPS, push_step

pytestmark = pytest.mark.skipif(
    not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4, the 'test' extra) is missing"
)

CLIENT_TIMEOUT = 90.0
FOUR_MIB = 4 * 1024 * 1024


def _big_body() -> str:
    line = "ledgermq interop — ünïcødé ✓ 0123456789 abcdefghijklmnopqrstuvwxyz\n"
    reps = FOUR_MIB // len(line.encode()) + 1
    return (line * reps).encode()[:FOUR_MIB].decode("utf-8", "ignore")


def interop_messages(topic: str, prefix: str) -> list[dict[str, Any]]:
    """Specs (text bodies, as the C++ child takes them): varied sizes, unicode, several keys, user properties."""
    bodies = ["x", "plain ascii body", "ünïcødé ✓ 中文 🚀 body", "y" * 5000, _big_body(), "tab\there\nnewline"]
    out = []
    for i, body in enumerate(bodies):
        out.append(
            {
                "topic": topic,
                "body": body,
                "tags": ["TagA", "TagB"][i % 2],
                "keys": f"key-{prefix}-{i} alt-{i}",
                "props": {UID: f"{prefix}-{i}", "color": ["red", "green"][i % 2], "seq": str(i), "note": f"ä=✓{i}"},
            }
        )
    return out


def _as_message(spec: dict[str, Any]) -> Message:
    return Message(spec["topic"], spec["body"].encode(), tags=spec["tags"], keys=spec["keys"], properties=spec["props"])


async def _send_ours(cluster: Cluster, specs: list[dict[str, Any]]) -> list[str]:
    async with Producer("PG_py_interop", cluster.namesrv_addr, send_timeout=10.0) as producer:
        ids = []
        for spec in specs:
            result = await producer.send(_as_message(spec))
            assert result.status.name == "SEND_OK"
            ids.append(result.msg_id)
        return ids


def test_our_producer_to_cpp_push_consumer(cluster: Cluster) -> None:
    topic = "PyToCpp"
    sent = interop_messages(topic, "py")
    ids = asyncio.run(_send_ours(cluster, sent))
    cluster.wait_route(topic)
    [push] = cluster.run_client([push_step("CG_py_to_cpp", topic, sent)], CLIENT_TIMEOUT)
    counts = collections.Counter(r["props"][UID] for r in push["messages"])
    assert all(n == 1 for n in counts.values()), counts
    got = {r["props"][UID]: r for r in push["messages"]}
    assert set(got) == {s["props"][UID] for s in sent}, cluster.explain()
    for spec, msg_id in zip(sent, ids, strict=True):
        rec = got[spec["props"][UID]]
        assert rec["body"] == spec["body"], f"{spec['props'][UID]}: body differs (len {len(rec['body'])})"
        assert (rec["topic"], rec["tags"], rec["keys"]) == (topic, spec["tags"], spec["keys"])
        assert {k: rec["props"][k] for k in USER_PROPS if k in spec["props"]} == spec["props"]
        assert rec["id"] == msg_id == rec["props"]["UNIQ_KEY"]


async def _read_all(cluster: Cluster, topic: str, count: int, timeout: float = 20.0) -> list[MessageRecord]:
    """Every message of the topic through our client's pull path (from offset 0 of each queue)."""
    inst = ClientInstance.acquire(cluster.namesrv_addr)
    await inst.start()
    try:
        queues = await inst.routes.find_subscribe_queues(topic)
        got: list[MessageRecord] = []
        next_offset: dict[MessageQueue, int] = dict.fromkeys(queues, 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(got) < count and loop.time() < deadline:
            progressed = False
            for mq in queues:
                result = await inst.pull_api.pull(mq, "CG_cpp_to_py", next_offset[mq], 32)
                if result.status is PullStatus.FOUND:
                    got.extend(result.messages)
                    progressed = True
                next_offset[mq] = result.next_begin_offset
            if not progressed:
                await asyncio.sleep(0.1)
        return got
    finally:
        await inst.release()


def test_cpp_producer_to_our_pull_path(cluster: Cluster) -> None:
    topic = "CppToPy"
    sent = interop_messages(topic, "cpp")
    step = {"op": "send", "mode": "sync", "group": "PG_cpp_to_py", "messages": sent, "max_message_size": FOUR_MIB}
    [send] = cluster.run_client([step])
    assert [r["status"] for r in send["results"]] == ["OK"] * len(sent)
    cluster.wait_route(topic)
    records = asyncio.run(_read_all(cluster, topic, len(sent)))
    by_uid = {r.properties[UID]: r for r in records}
    assert len(by_uid) == len(records) == len(sent)
    for spec, result in zip(sent, send["results"], strict=True):
        rec = by_uid[spec["props"][UID]]
        assert rec.body == spec["body"].encode(), f"{spec['props'][UID]}: body differs"
        assert (rec.topic, rec.tags, " ".join(rec.keys)) == (topic, spec["tags"], spec["keys"])
        assert {k: rec.properties[k] for k in spec["props"]} == spec["props"]
        assert rec.msg_id == result["msg_id"]
        assert rec.broker_name == cluster.broker_name


async def _push_all(cluster: Cluster, topic: str, count: int, timeout: float = 30.0) -> list[MessageRecord]:
    """Every message of the topic through our push consumer (clustering, from the first offset)."""
    got: list[MessageRecord] = []

    def on_messages(msgs: list[MessageRecord], _context: object) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "CG_cpp_to_py_push", cluster.namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic)
    consumer.register_listener(on_messages)
    async with consumer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(got) < count and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # room for a duplicate to show
    return got


def test_cpp_producer_to_our_push_consumer(cluster: Cluster) -> None:
    topic = "CppToPyPush"
    sent = interop_messages(topic, "cpush")
    step = {"op": "send", "mode": "sync", "group": "PG_cpp_to_py", "messages": sent, "max_message_size": FOUR_MIB}
    [send] = cluster.run_client([step])
    cluster.wait_route(topic)
    records = asyncio.run(_push_all(cluster, topic, len(sent)))
    by_uid = {r.properties[UID]: r for r in records}
    assert len(by_uid) == len(records) == len(sent), sorted(r.properties[UID] for r in records)
    for spec, result in zip(sent, send["results"], strict=True):
        rec = by_uid[spec["props"][UID]]
        assert rec.body == spec["body"].encode(), f"{spec['props'][UID]}: body differs"
        assert (rec.topic, rec.tags, " ".join(rec.keys)) == (topic, spec["tags"], spec["keys"])
        assert {k: rec.properties[k] for k in spec["props"]} == spec["props"]
        assert rec.msg_id == result["msg_id"] and rec.reconsume_times == 0


def test_empty_bodies_are_refused_by_both_clients(cluster: Cluster) -> None:
    """RocketMQ's validators (Java, C++, ours) refuse a zero-length body before sending: nothing is stored, and the
    caller gets a clear error instead of a silently dropped message."""
    from ledgermq.client.errors import MessageInvalidError

    async def ours() -> str:
        async with Producer("PG_py_empty", cluster.namesrv_addr) as producer:
            with pytest.raises(MessageInvalidError) as info:
                await producer.send(Message("EmptyBody", b""))
            return str(info.value)

    assert "zero" in asyncio.run(ours())
    with pytest.raises(AssertionError, match="body"):
        cluster.run_client([{"op": "send", "mode": "sync", "group": "PG_cpp_empty", "messages": [
            {"topic": "EmptyBody", "body": "", "props": {UID: "empty"}}
        ]}])  # fmt: skip
