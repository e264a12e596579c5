"""Route -> publish queues, the TBW102 fallback shape, and name-server failover (pure parts)."""

from __future__ import annotations

import asyncio

import pytest

from ledgermq.client.errors import MQConnectError
from ledgermq.client.instance.routes import (
    NameServerClient,
    RouteCache,
    default_topic_route,
    publish_info_from_route,
    split_namesrv_addrs,
)
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import BrokerData, QueueData, TopicRouteData


def route(*brokers: tuple[str, int, int, bool], order_conf: str | None = None) -> TopicRouteData:
    """(name, write queues, perm, has master) per broker; read queues = 8."""
    qds = [QueueData(name, 8, wq, perm) for name, wq, perm, _ in brokers]
    bds = [
        BrokerData("C", name, {0: f"10.0.0.{i}:10911", 1: f"10.0.1.{i}:10911"} if master else {1: "10.0.2.1:10911"})
        for i, (name, _, _, master) in enumerate(brokers)
    ]
    return TopicRouteData(qds, bds, order_conf)


def test_writable_queues_of_brokers_with_a_master_sorted_by_broker_name() -> None:
    r = route(("broker-b", 2, 6, True), ("broker-a", 3, 6, True), ("broker-c", 4, 4, True), ("broker-d", 2, 6, False))
    info = publish_info_from_route("T", r)
    assert info.queues == [
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-a", 1),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-b", 1),
    ]  # broker-c is read-only, broker-d has no master
    assert info.ok and not info.order_topic
    assert info.write_queue_nums("broker-b") == 2
    assert info.write_queue_nums("nope") == -1


def test_write_only_perm_counts_and_empty_route_is_not_ok() -> None:
    assert len(publish_info_from_route("T", route(("b", 2, 2, True))).queues) == 2
    info = publish_info_from_route("T", TopicRouteData())
    assert not info.ok


def test_order_topic_conf_alone_decides() -> None:
    r = route(("broker-a", 8, 6, True), order_conf="broker-b:2;broker-a:1")
    info = publish_info_from_route("T", r)
    assert info.order_topic
    assert info.queues == [MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-b", 1),
                           MessageQueue("T", "broker-a", 0)]  # fmt: skip


def test_default_topic_route_uses_min_of_4_and_read_queues() -> None:
    tbw = TopicRouteData([QueueData("a", 8, 8, 7), QueueData("b", 2, 8, 7)], [BrokerData("C", "a", {0: "x:1"})])
    shaped = default_topic_route(tbw)
    assert [(q.read_queue_nums, q.write_queue_nums) for q in shaped.queue_datas] == [(4, 4), (2, 2)]
    assert tbw.queue_datas[0].write_queue_nums == 8  # the original is untouched
    info = publish_info_from_route("NewTopic", shaped)
    assert info.queues == [MessageQueue("NewTopic", "a", i) for i in range(4)]  # b has no master


def test_split_namesrv_addrs() -> None:
    assert split_namesrv_addrs("a:1; b:2;;") == ["a:1", "b:2"]
    assert split_namesrv_addrs(["a:1", " "]) == ["a:1"]


class FakeRemoting(RemotingClient):
    """Answers GET_ROUTEINFO_BY_TOPIC from a table; addresses in ``down`` refuse connections."""

    def __init__(self, routes: dict[str, TopicRouteData], down: set[str]) -> None:
        super().__init__()
        self.routes = routes
        self.down = down
        self.calls: list[tuple[str, str]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        topic = cmd.ext_fields["topic"]
        self.calls.append((addr, topic))
        if addr in self.down:
            raise ConnectError(f"cannot connect to {addr}")
        r = self.routes.get(topic)
        if r is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "no topic")
        return cmd.response(ResponseCode.SUCCESS, body=r.encode())


def test_name_server_failover_and_sticky_preference() -> None:
    async def main() -> None:
        fake = FakeRemoting({"T": route(("a", 2, 6, True))}, {"ns1:9876"})
        ns = NameServerClient(fake, "ns1:9876;ns2:9876")
        ns.preferred = 0
        assert await ns.route("T") is not None
        assert fake.calls == [("ns1:9876", "T"), ("ns2:9876", "T")]
        assert ns.preferred == 1
        fake.calls.clear()
        assert await ns.route("missing") is None
        assert fake.calls == [("ns2:9876", "missing")]
        fake.down.add("ns2:9876")
        with pytest.raises(MQConnectError):
            await ns.route("T")

    asyncio.run(main())


def test_route_cache_falls_back_to_tbw102_and_tracks_masters() -> None:
    async def main() -> None:
        tbw = route(("a", 8, 7, True), ("b", 8, 7, True))
        fake = FakeRemoting({"TBW102": tbw}, set())
        cache = RouteCache(NameServerClient(fake, "ns:1"))
        info = await cache.find_publish_info("New")
        assert info is not None and info.ok
        assert len(info.queues) == 8 and {q.topic for q in info.queues} == {"New"}
        assert [t for _, t in fake.calls] == ["New", "TBW102"]
        assert cache.master_addr("a") == "10.0.0.0:10911"
        assert cache.master_addrs() == ["10.0.0.0:10911", "10.0.0.1:10911"]
        assert "10.0.1.0:10911" in cache.all_addrs()
        # cached: no further lookups
        fake.calls.clear()
        assert await cache.find_publish_info("New") is info
        assert fake.calls == []
        # the real route appears; a refresh replaces the TBW102-shaped one, keeping the position
        info.index = 41
        fake.routes["New"] = route(("a", 2, 6, True))
        await cache.refresh_all()
        new = cache.publish["New"]
        assert len(new.queues) == 2 and new.index == 41
        # a topic nobody knows and no TBW102: no route
        del fake.routes["TBW102"]
        missing = await cache.find_publish_info("Other")
        assert missing is None or not missing.ok

    asyncio.run(main())


def test_a_route_without_writable_queues_does_not_fall_back_to_tbw102() -> None:
    async def main() -> None:
        fake = FakeRemoting({"RO": route(("a", 2, 4, True)), "TBW102": route(("a", 8, 7, True))}, set())
        cache = RouteCache(NameServerClient(fake, "ns:1"))
        info = await cache.find_publish_info("RO")
        assert info is not None and not info.ok
        assert [t for _, t in fake.calls] == ["RO"]

    asyncio.run(main())
