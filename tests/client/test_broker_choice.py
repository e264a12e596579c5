"""Which broker of a group serves reads and offset commits (``findBrokerAddressInSubscribe`` and the pull
node that ``suggestWhichBrokerId`` sets), without sockets: the route cache is filled by hand and the
remoting client is a fake that records addresses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledgermq.client.errors import MQClientError, MQConnectError
from ledgermq.client.instance.pull_api import PullAPI, PullStatus, filter_by_tags
from ledgermq.client.instance.routes import NameServerClient, RouteCache, subscribe_queues_from_route
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRouteData
from ledgermq.protocol.tag_expression import parse_tag_expression

MASTER, SLAVE1, SLAVE2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
MQ = MessageQueue("T", "broker-a", 0)


def cache(addrs: dict[int, str]) -> RouteCache:
    rc = RouteCache(NameServerClient(RemotingClient(), "127.0.0.1:1"))
    rc.broker_addrs = {"broker-a": dict(addrs)}
    return rc


def test_the_wanted_id_then_the_next_slave_then_the_lowest_live_id() -> None:
    rc = cache({0: MASTER, 1: SLAVE1, 2: SLAVE2})
    assert rc.find_in_subscribe("broker-a", 0) == (MASTER, False)
    assert rc.find_in_subscribe("broker-a", 1) == (SLAVE1, True)
    rc = cache({0: MASTER, 2: SLAVE2})
    assert rc.find_in_subscribe("broker-a", 1) == (SLAVE2, True)  # brokerId + 1
    assert rc.find_in_subscribe("broker-a", 5, only_this=True) is None
    assert rc.find_in_subscribe("broker-a", 5) == (MASTER, False)  # the lowest id the group has
    rc = cache({2: SLAVE2, 1: SLAVE1})  # the master is gone from the route
    assert rc.find_in_subscribe("broker-a", 0, only_this=True) is None
    choice = rc.find_in_subscribe("broker-a", 0)
    assert choice == (SLAVE1, True) and choice is not None and choice.slave
    assert rc.find_in_subscribe("nope", 0) is None


def test_subscribe_queues_are_the_readable_queues_sorted() -> None:
    r = TopicRouteData(
        [
            QueueData("b", 2, 2, PERM_READ | PERM_WRITE),
            QueueData("a", 3, 1, PERM_READ),
            QueueData("c", 4, 4, PERM_WRITE),
        ],
        [BrokerData("C", "a", {0: MASTER}), BrokerData("C", "b", {1: SLAVE1})],
    )
    assert subscribe_queues_from_route("T", r) == [
        MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "a", 2),
        MessageQueue("T", "b", 0), MessageQueue("T", "b", 1),
    ]  # fmt: skip


class FakeRemoting:
    """Answers PULL_MESSAGE with NO_NEW_MSG and a suggested broker id; records where requests went."""

    def __init__(self, suggest: int = 0, dead: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, int, dict[str, str]]] = []
        self.suggest = suggest
        self.dead = dead

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.calls.append((addr, cmd.code, dict(cmd.ext_fields)))
        if addr in self.dead:
            raise ConnectError(f"cannot connect to {addr}")
        if cmd.code == RequestCode.QUERY_CONSUMER_OFFSET:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND)
        ext: dict[str, Any] = {"suggestWhichBrokerId": self.suggest, "nextBeginOffset": 5, "minOffset": 0}
        return cmd.response(ResponseCode.PULL_NOT_FOUND, None, {**ext, "maxOffset": 5})


def api(addrs: dict[int, str], remoting: FakeRemoting) -> PullAPI:
    rc = cache(addrs)

    async def no_update(topic: str, *, use_default: bool = False) -> bool:
        return False

    rc.update = no_update  # type: ignore[method-assign]
    return PullAPI(remoting, rc)  # type: ignore[arg-type]


def test_pulls_follow_the_suggested_broker_and_never_commit_on_a_slave() -> None:
    remoting = FakeRemoting(suggest=1)
    pull_api = api({0: MASTER, 1: SLAVE1}, remoting)

    async def go() -> None:
        first = await pull_api.pull(MQ, "g", 0, commit_offset=3)
        assert first.status is PullStatus.NO_NEW_MSG and not first.from_slave
        second = await pull_api.pull(MQ, "g", 5, commit_offset=3)
        assert second.from_slave and second.broker_addr == SLAVE1

    asyncio.run(go())
    (a1, _, h1), (a2, _, h2) = remoting.calls
    assert (a1, int(h1["sysFlag"]) & 1) == (MASTER, 1)  # the commit flag goes to the master
    assert (a2, int(h2["sysFlag"]) & 1) == (SLAVE1, 0)  # never to a slave
    assert pull_api.pull_node(MQ) == 1


def test_reads_and_offset_queries_go_to_a_slave_while_the_master_is_gone() -> None:
    remoting = FakeRemoting()
    pull_api = api({1: SLAVE1}, remoting)

    async def go() -> None:
        result = await pull_api.pull(MQ, "g", 0)
        assert result.from_slave
        assert await pull_api.query_consumer_offset(MQ, "g") is None
        with pytest.raises(MQClientError, match="master"):
            await pull_api.lock_batch("broker-a", "T", "g", "cid", [MQ])  # locks live on the master only

    asyncio.run(go())
    assert [c[0] for c in remoting.calls] == [SLAVE1, SLAVE1]


def test_a_failed_pull_raises_a_connect_error_and_refreshes_the_route_once() -> None:
    remoting = FakeRemoting(dead=frozenset({MASTER}))
    pull_api = api({0: MASTER, 1: SLAVE1}, remoting)
    refreshed: list[str] = []

    async def update(topic: str, *, use_default: bool = False) -> bool:
        refreshed.append(topic)
        pull_api.routes.broker_addrs = {"broker-a": {1: SLAVE1}}  # the name server no longer lists the master
        return True

    pull_api.routes.update = update  # type: ignore[method-assign]

    async def go() -> None:
        for _ in range(2):  # the second failure (before the refresh ran) starts no second refresh
            with pytest.raises(MQConnectError):
                await pull_api.pull(MQ, "g", 0)
        await asyncio.sleep(0.01)
        assert (await pull_api.pull(MQ, "g", 0)).from_slave

    asyncio.run(go())
    assert refreshed == ["T"]


def test_the_client_side_tag_recheck() -> None:
    msgs = [MessageRecord("T", b"", properties={"TAGS": t}) for t in ("a", "b", "x")] + [MessageRecord("T", b"")]
    assert [m.tags for m in filter_by_tags(msgs, parse_tag_expression("a || x"))] == ["a", "x"]
    assert filter_by_tags(msgs, parse_tag_expression("*")) == msgs
    assert filter_by_tags(msgs, parse_tag_expression(" ")) == msgs  # no tags: nothing to re-check
