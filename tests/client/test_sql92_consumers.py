"""Our consumers with SQL92 subscriptions: local validation, CHECK_CLIENT_CONFIG at start
(a broker that cannot filter makes start fail with its reason), and exactly the matching
messages through the push and the lite pull consumer (two broker groups, in-process)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
)
from ledgermq.client.errors import MQBrokerError, MQClientError
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.message import MessageRecord
from tests.client.cluster import Cluster, running
from tests.client.test_lite_pull_consumer import make_topic

pytestmark = pytest.mark.timeout(60)

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
EXPR = "(color = 'red' AND seq BETWEEN 3 AND 40) OR price > 99.5"
TOPIC = "SqlT"


def props_of(n: int) -> dict[str, str]:
    props = {"uid": f"u{n}", "color": ["red", "green", "blue"][n % 3], "seq": str(n)}
    if n % 4 == 0:
        props["price"] = f"{n * 2.5}"
    return props


def expected(count: int) -> set[str]:
    out = set()
    for n in range(count):
        p = props_of(n)
        if (p["color"] == "red" and 3 <= n <= 40) or ("price" in p and float(p["price"]) > 99.5):
            out.add(p["uid"])
    return out


async def send(cluster: Cluster, count: int) -> None:
    await make_topic(cluster.ns_addr, [cluster.addr(n) for n in cluster.brokers], TOPIC, 2)
    async with Producer("sql-pg", cluster.ns_addr, client_ip="127.0.0.1") as p:
        for n in range(count):
            await p.send(Message(TOPIC, f"body {n}".encode(), tags=f"T{n % 2}", properties=props_of(n)))


def run(root: Path, body: Any, enabled: bool = True) -> None:
    async def main() -> None:
        async with running(root, ("broker-a", "broker-b"), broker={"enable_property_filter": enabled}) as cluster:
            await asyncio.wait_for(body(cluster), 45)

    asyncio.run(main())


def test_subscriptions_are_validated_locally() -> None:
    push = PushConsumer("sql-cg", "127.0.0.1:1")
    with pytest.raises(MQClientError, match=r"Value ''x'' cannot be compared\. \(at line 1, column 3\)"):
        push.subscribe("T", "a > 'x'", expression_type="SQL92")
    with pytest.raises(MQClientError, match="Expression can't be null"):
        push.subscribe("T", MessageSelector.by_sql("  "))
    with pytest.raises(MQClientError, match="not supported"):
        push.subscribe("T", "a = 1", expression_type="XPATH")
    push.subscribe("T", MessageSelector.by_sql("a = 1"))
    push.subscribe("U", "TagA || TagB")  # the tag form is unchanged
    assert (push.subscriptions["T"].expression_type, push.subscriptions["T"].sub_string) == ("SQL92", "a = 1")
    assert push.subscriptions["U"].tags_set == ["TagA", "TagB"]
    lite = LitePullConsumer("sql-cg", "127.0.0.1:1")
    with pytest.raises(MQClientError, match="Encountered"):
        lite.subscribe("T", "a = = 1", expression_type="SQL92")
    assert not lite._plan.subscriptions  # a refused subscription leaves nothing behind
    lite.subscribe("T", MessageSelector.by_sql("a = 1"))
    lite.subscribe("U", "TagA")


def test_start_fails_with_the_brokers_reason_when_it_cannot_filter(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await send(cluster, 3)
        push = PushConsumer("sql-cg", cluster.ns_addr, client_ip="127.0.0.1", consume_from_where=FIRST)
        push.subscribe(TOPIC, MessageSelector.by_sql("a > 1"))
        push.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        with pytest.raises(MQBrokerError) as info:
            await push.start()
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert "does not support consumer to filter message by SQL92" in str(info.value)
        assert not push.running
        lite = LitePullConsumer("sql-lite", cluster.ns_addr, client_ip="127.0.0.1")
        lite.subscribe(TOPIC, "a > 1", expression_type="SQL92")
        with pytest.raises(MQBrokerError, match="enablePropertyFilter"):
            await lite.start()
        assert not lite.running
        # A tag subscription starts as before.
        tags = PushConsumer("tag-cg", cluster.ns_addr, client_ip="127.0.0.1")
        tags.subscribe(TOPIC, "T0")
        tags.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        async with tags:
            assert tags.running

    run(tmp_path, body, enabled=False)


def test_push_and_lite_pull_get_exactly_the_matching_messages(tmp_path: Path) -> None:
    count = 90
    want = expected(count)
    assert 0 < len(want) < count

    async def body(cluster: Cluster) -> None:
        await send(cluster, count)
        pushed: list[MessageRecord] = []

        def on_messages(msgs: list[MessageRecord], _ctx: object) -> ConsumeConcurrentlyStatus:
            pushed.extend(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        push = PushConsumer("sql-push", cluster.ns_addr, client_ip="127.0.0.1", consume_from_where=FIRST)
        push.subscribe(TOPIC, EXPR, expression_type="SQL92")
        push.register_listener(on_messages)
        lite = LitePullConsumer("sql-lite", cluster.ns_addr, client_ip="127.0.0.1", consume_from_where=FIRST)
        lite.subscribe(TOPIC, MessageSelector.by_sql(EXPR))
        polled: list[MessageRecord] = []
        async with push, lite:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (len(pushed) < len(want) or len(polled) < len(want)) and loop.time() < deadline:
                polled += await lite.poll(0.2)
            polled += await lite.poll(0.5)  # room for an extra one to show
        for got in (pushed, polled):
            uids = [m.properties["uid"] for m in got]
            assert len(uids) == len(set(uids)), "duplicates"
            assert set(uids) == want
            assert {m.broker_name for m in got} == {"broker-a", "broker-b"}

    run(tmp_path, body)


class _Routes:
    def __init__(self, names: list[str]) -> None:
        from ledgermq.protocol.route import BrokerData, TopicRouteData

        self.routes = {TOPIC: TopicRouteData(broker_datas=[BrokerData("c", n, {0: f"{n}:1"}) for n in names])}

    def any_addr(self, name: str) -> str:
        return f"{name}:1"


class _Remoting:
    def __init__(self, answers: dict[str, int | None]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def invoke(self, addr: str, cmd: Any, timeout: float) -> Any:
        from ledgermq.net.client import ConnectError
        from ledgermq.protocol import fastjson

        self.asked.append((addr, fastjson.loads(cmd.body)))
        code = self.answers[addr]
        if code is None:
            raise ConnectError(f"{addr} refused the connection")
        return cmd.response(code, "no way" if code else None)


def check(answers: dict[str, int | None]) -> _Remoting:
    from types import SimpleNamespace

    from ledgermq.client.consumer.client_check import check_client_in_broker
    from ledgermq.client.consumer.common import SubscriptionData

    remoting = _Remoting(answers)
    names = [a.split(":")[0] for a in answers]
    instance = SimpleNamespace(routes=_Routes(names), remoting=remoting, client_id="me@1", api_timeout=1.0)
    subs = [SubscriptionData.build(TOPIC, "a = 1", expression_type="SQL92"), SubscriptionData.build(TOPIC, "T0")]
    asyncio.run(check_client_in_broker(instance, "g", subs))  # type: ignore[arg-type]
    return remoting


def test_the_start_check_asks_every_broker_group_and_tolerates_one_down() -> None:
    remoting = check({"a:1": 0, "b:1": 0})
    assert [addr for addr, _ in remoting.asked] == ["a:1", "b:1"]  # the TAG subscription is not checked
    body = remoting.asked[0][1]
    assert body["group"] == "g" and body["clientId"] == "me@1"
    assert body["subscriptionData"]["expressionType"] == "SQL92" and body["subscriptionData"]["subString"] == "a = 1"
    check({"a:1": None, "b:1": 0})  # one broker down: the other one answers for the topic
    with pytest.raises(MQClientError, match="no broker of SqlT could be asked"):
        check({"a:1": None, "b:1": None})
    with pytest.raises(MQBrokerError) as info:
        check({"a:1": 0, "b:1": ResponseCode.SUBSCRIPTION_PARSE_FAILED})
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and info.value.addr == "b:1"
