"""The producer against a real name server and real brokers in this process (127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client import Message, MessageQueue, MQBrokerError, Producer, SendFailedError, SendStatus
from ledgermq.client.errors import ClientStateError, MessageInvalidError, MQClientError, MQConnectError, NoRouteError
from ledgermq.client.producer.selector import select_by_hash
from ledgermq.client.producer.send_codec import send_request
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.testing.ports import closed_port
from tests.admin.servers import poll
from tests.client.cluster import Cluster, running

pytestmark = pytest.mark.timeout(60)


def run(root: Path, body: Callable[[Cluster], Awaitable[None]], names: tuple[str, ...] = ("broker-a",),
        **store: Any) -> None:  # fmt: skip
    async def main() -> None:
        async with running(root, names, **store) as cluster:
            await asyncio.wait_for(body(cluster), 30)

    asyncio.run(main())


def producer(cluster: Cluster, **kw: Any) -> Producer:
    kw.setdefault("client_ip", "127.0.0.1")
    return Producer("pg-test", cluster.ns_addr, **kw)


class AttemptSpy:
    """Records the broker of every send attempt."""

    def __init__(self, p: Producer) -> None:
        self.brokers: list[str] = []
        inner = p._send_kernel

        async def spy(out: Any, mq: MessageQueue, timeout: float, oneway: bool) -> Any:
            self.brokers.append(mq.broker_name)
            return await inner(out, mq, timeout, oneway)

        p._send_kernel = spy  # type: ignore[method-assign]
        # a send's first attempt usually goes out without _send_kernel (client/producer/fast_send.py)
        start_invoke = p.remoting.start_invoke

        def spy_fast(addr: str, cmd: Any, timeout: float, on_done: Any) -> Any:
            started = start_invoke(addr, cmd, timeout, on_done)
            if started is not None:
                self.brokers.append(cmd.ext_fields["n"])
            return started

        p.remoting.start_invoke = spy_fast  # type: ignore[method-assign]


def test_send_to_an_auto_created_topic_stores_what_was_sent(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            assert "pg-test" in cluster.brokers["broker-a"].broker.producers.groups  # heartbeat at start
            msg = Message("AutoTopic", "héllo".encode(), tags="TagA", keys=["k1", "k2"], properties={"color": "blue"})
            result = await p.send(msg)
            assert result.status is SendStatus.SEND_OK
            assert result.queue.topic == "AutoTopic" and result.queue.broker_name == "broker-a"
            assert 0 <= result.queue.queue_id < 4  # min(4, TBW102's 8 queues)
            assert len(result.msg_id) == 32 and result.region_id == "DefaultRegion"
            host, _ = decode_offset_msg_id(result.offset_msg_id)
            assert host == ("127.0.0.1", cluster.brokers["broker-a"].port)
            records = await cluster.pull_until("broker-a", "AutoTopic", result.queue.queue_id, 1)
            rec = records[result.queue_offset]
            assert rec.body == "héllo".encode()
            assert rec.tags == "TagA" and rec.keys == ["k1", "k2"]
            assert rec.properties["color"] == "blue"
            assert rec.properties[P.UNIQ_KEY] == result.msg_id
            assert rec.offset_msg_id == result.offset_msg_id
            assert rec.sysflag & SF.COMPRESSED == 0
            # a second send reuses the cached route and gets another id
            again = await p.send(Message("AutoTopic", b"x"))
            assert again.msg_id != result.msg_id
        assert "pg-test" not in cluster.brokers["broker-a"].broker.producers.groups  # unregistered

    run(tmp_path, body)


def test_compressed_body_round_trip(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        payload = b"ledgermq " * 1000  # 9000 bytes, well compressible
        async with producer(cluster, compress_over=4096) as p:
            result = await p.send(Message("Zipped", payload, tags="z"))
            small = await p.send(Message("Zipped", b"s" * 4095))
        raw = (await cluster.pull_until("broker-a", "Zipped", result.queue.queue_id, 1, inflate=False))[0]
        assert raw.sysflag & SF.COMPRESSED and raw.sysflag & SF.COMPRESSION_TYPE_MASK == SF.COMPRESSION_ZLIB
        assert len(raw.body) < len(payload)
        inflated = await cluster.pull("broker-a", "Zipped", result.queue.queue_id, result.queue_offset)
        assert inflated[0].body == payload
        under = await cluster.pull_until(
            "broker-a", "Zipped", small.queue.queue_id, 1, offset=small.queue_offset, inflate=False
        )
        assert under[0].sysflag & SF.COMPRESSED == 0 and under[0].body == b"s" * 4095

    run(tmp_path, body)


def test_batch_send(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            msgs = [Message("Batched", f"m{i}".encode(), tags="B", keys=f"key{i}") for i in range(3)]
            result = await p.send_batch(msgs)
            with pytest.raises(MessageInvalidError):
                await p.send_batch([Message("Batched", b"a"), Message("Other", b"b")])
            with pytest.raises(MessageInvalidError):
                await p.send_batch([Message("Batched", b"a", delay_level=2)])
        ids = result.msg_id.split(",")
        assert len(ids) == 3 and len(set(ids)) == 3
        assert len(result.offset_msg_id.split(",")) == 3
        records = await cluster.pull_until("broker-a", "Batched", result.queue.queue_id, 3)
        got = records[result.queue_offset : result.queue_offset + 3]
        assert [r.body for r in got] == [b"m0", b"m1", b"m2"]
        assert [r.properties[P.UNIQ_KEY] for r in got] == ids
        assert [r.keys for r in got] == [["key0"], ["key1"], ["key2"]]
        assert [r.queue_offset for r in got] == [result.queue_offset + i for i in range(3)]

    run(tmp_path, body)


def test_oneway_send(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            queues = await p.fetch_publish_queues("OneWay")
            assert len(queues) == 4
            await p.send_to_queue(Message("OneWay", b"create"), queues[0])  # the topic exists now
            for _ in range(4):
                await p.send_oneway(Message("OneWay", b"fire", tags="ow"))

        async def all_four() -> int | None:
            n = 0
            for q in range(4):
                n += sum(r.body == b"fire" for r in await cluster.pull("broker-a", "OneWay", q))
            return n if n == 4 else None

        assert await poll("the oneway messages", all_four, timeout=5) == 4

    run(tmp_path, body)


def test_orderly_sends_go_to_the_chosen_queue(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            queues = await p.fetch_publish_queues("Ordered")
            chosen = queues[2]
            r1 = await p.send_to_queue(Message("Ordered", b"q2-a"), chosen)
            r2 = await p.send_to_queue(Message("Ordered", b"q2-b"), chosen)
            assert r1.queue == r2.queue == chosen and r2.queue_offset == r1.queue_offset + 1
            expected = select_by_hash(queues, None, "order-42")
            results = [await p.send_orderly(Message("Ordered", f"o{i}".encode()), select_by_hash, "order-42")
                       for i in range(3)]  # fmt: skip
            assert {r.queue for r in results} == {expected}
            with pytest.raises(MessageInvalidError):
                await p.send_to_queue(Message("Ordered", b"x"), MessageQueue("Other", "broker-a", 0))
            with pytest.raises(MQBrokerError) as info:  # queue id past the topic's queues: SYSTEM_ERROR, no retry
                await p.send_to_queue(Message("Ordered", b"x"), MessageQueue("Ordered", "broker-a", 99))
            assert info.value.code == 1
            batch = await p.send_batch_to_queue([Message("Ordered", b"q2-c"), Message("Ordered", b"q2-d")], chosen)
            assert batch.queue == chosen and batch.queue_offset == r2.queue_offset + 1
        stored = await cluster.pull_until("broker-a", "Ordered", chosen.queue_id, 4)
        assert [r.body for r in stored[:4]] == [b"q2-a", b"q2-b", b"q2-c", b"q2-d"]
        ordered = await cluster.pull_until("broker-a", "Ordered", expected.queue_id, 3)
        assert [r.body for r in ordered if r.body.startswith(b"o")] == [b"o0", b"o1", b"o2"]

    run(tmp_path, body)


def test_non_retriable_broker_error_is_raised_at_once(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, compress_over=10**9, max_message_size=1024 * 1024) as p:
            spy = AttemptSpy(p)
            with pytest.raises(MQBrokerError) as info:
                await p.send(Message("TooBig", os.urandom(100 * 1024)))
            assert info.value.code == 13 and not info.value.retriable  # MESSAGE_ILLEGAL
            assert len(spy.brokers) == 1

    run(tmp_path, body, max_message_size=64 * 1024)


def test_client_side_refusals() -> None:
    p = Producer("pg", "127.0.0.1:1", client_ip="127.0.0.1")

    async def main() -> None:
        with pytest.raises(ClientStateError):
            await p.send(Message("T", b"x"))
        await p.shutdown()

    asyncio.run(main())
    with pytest.raises(MessageInvalidError):
        p._prepare(Message("T", b""))
    with pytest.raises(MessageInvalidError):
        p._prepare(Message("bad topic", b"x"))
    with pytest.raises(MessageInvalidError):
        p._prepare(Message("SCHEDULE_TOPIC_XXXX", b"x"))
    with pytest.raises(MessageInvalidError):
        p._prepare(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
    with pytest.raises(MessageInvalidError):
        p._prepare(Message("T", b"x", properties={"a\x01": "b"}))
    with pytest.raises(MQClientError):
        Producer("", "127.0.0.1:1")
    out = p._prepare(Message("T", b"x", tags="t", keys="a b", delay_level=3, flag=7, properties={"u": "v"}))
    assert P.decode_properties(out.properties) == {
        "TAGS": "t", "KEYS": "a b", "WAIT": "true", "DELAY": "3", "u": "v", "UNIQ_KEY": out.msg_id,
    }  # fmt: skip
    assert out.properties.startswith("TAGS\x01t\x02KEYS\x01a b\x02WAIT\x01true")
    mq = MessageQueue("T", "broker-x", 3)
    req = send_request(
        out, mq, p.group, p.settings.create_topic_key, p.settings.default_topic_queue_nums, p.clock.wall_ms()
    )
    assert set(req.ext_fields) == set("abcdefghijkmn")  # l only for retry topics
    assert req.ext_fields["e"] == "3" and req.ext_fields["n"] == "broker-x" and req.ext_fields["m"] == "false"
    assert req.ext_fields["c"] == "TBW102" and req.ext_fields["d"] == "4" and req.ext_fields["h"] == "7"


def test_failover_to_the_other_broker_group(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, send_timeout=5.0) as p:
            queues = await p.fetch_publish_queues("Fail")
            assert {q.broker_name for q in queues} == {"broker-a", "broker-b"} and len(queues) == 8
            for q in queues:  # create the topic on both brokers
                await p.send_to_queue(Message("Fail", b"warm"), q)
            await cluster.stop_broker("broker-a")
            spy = AttemptSpy(p)
            results = [await p.send(Message("Fail", f"after-{i}".encode())) for i in range(8)]
            assert {r.queue.broker_name for r in results} == {"broker-b"}
            assert "broker-a" in spy.brokers  # the cached route still named it: retried away from it
            assert len(spy.brokers) > len(results)

    run(tmp_path, body, names=("broker-a", "broker-b"))


def test_failover_with_latency_fault_avoidance_isolates_the_dead_broker(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, send_latency_fault_enable=True) as p:
            for q in await p.fetch_publish_queues("FailFast"):
                await p.send_to_queue(Message("FailFast", b"warm"), q)
            await cluster.stop_broker("broker-b")
            spy = AttemptSpy(p)
            results = [await p.send(Message("FailFast", b"x")) for _ in range(8)]
            assert {r.queue.broker_name for r in results} == {"broker-a"}
            assert spy.brokers.count("broker-b") <= 1  # isolated after its first failure
            assert not p.fault.is_available("broker-b")

    run(tmp_path, body, names=("broker-a", "broker-b"))


def test_only_a_dead_broker_fails_after_retry_times_plus_one_attempts(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, retry_times=2) as p:
            await p.send(Message("Dead", b"warm"))
            await cluster.stop_broker("broker-a")
            spy = AttemptSpy(p)
            with pytest.raises(SendFailedError) as info:
                await p.send(Message("Dead", b"lost"))
            assert info.value.attempts == 3 and info.value.brokers == ["broker-a"] * 3
            assert spy.brokers == ["broker-a"] * 3
            assert info.value.last is not None and info.value.last.retriable

    run(tmp_path, body)


def test_unreachable_name_server_is_skipped(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        dead = f"127.0.0.1:{closed_port()}"
        p = producer(cluster)
        p.routes.namesrv.addrs = [dead, cluster.ns_addr]
        p.routes.namesrv.preferred = 0
        async with p:
            result = await p.send(Message("ViaSecondNs", b"x"))
            assert result.status is SendStatus.SEND_OK
            assert p.routes.namesrv.preferred == 1

    run(tmp_path, body)


def test_periodic_route_refresh_drops_a_stopped_broker(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, poll_namesrv_interval=0.1) as p:
            for q in await p.fetch_publish_queues("Refreshed"):
                await p.send_to_queue(Message("Refreshed", b"warm"), q)
            await cluster.stop_broker("broker-a")  # unregisters from the name server

            async def only_b() -> bool:
                info = p.routes.publish.get("Refreshed")
                return info is not None and info.broker_names() == ["broker-b"]

            await poll("the refreshed route", only_b, timeout=5)
            spy = AttemptSpy(p)
            for _ in range(4):
                await p.send(Message("Refreshed", b"x"))
            assert spy.brokers == ["broker-b"] * 4

    run(tmp_path, body, names=("broker-a", "broker-b"))


def test_no_name_server_reachable_is_a_no_route_error() -> None:
    async def main() -> None:
        async with Producer("pg", f"127.0.0.1:{closed_port()}", client_ip="127.0.0.1", api_timeout=1.0) as p:
            with pytest.raises(NoRouteError) as info:
                await p.send(Message("T", b"x"))
            assert isinstance(info.value.__cause__, MQConnectError)

    asyncio.run(asyncio.wait_for(main(), 10))
