"""SQL92 property filtering end to end with real processes: a name server and a broker
(``enablePropertyFilter=true``) as processes, messages from Apache's C++ client (a child
process) and from our producer, consumed through SQL92 subscriptions by our push consumer
and our lite pull consumer; each must receive exactly the matching set, once.

The C++ client (rocketmq 0.4.4 wheel) only sends here: its ``subscribe`` takes a tag
expression and has no SQL92 form.
"""

from __future__ import annotations

import asyncio
import collections
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
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.protocol.message import MessageRecord
from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster

pytestmark = [
    pytest.mark.skipif(not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4) is missing"),
    pytest.mark.timeout(120),
]

TOPIC = "SqlCompat"
UID = "compat_uid"
# TAGS is a stored property too; "level" is missing on some messages (unknown, never matched).
EXPR = "(region IN ('eu', 'us') AND level >= 3) OR (TAGS = 'urgent' AND amount > 99.5)"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def spec(prefix: str, n: int) -> dict[str, Any]:
    props = {UID: f"{prefix}-{n}", "region": ["eu", "us", "ap"][n % 3], "amount": f"{n * 7.5}"}
    if n % 5 != 0:
        props["level"] = str(n % 6)
    return {"topic": TOPIC, "body": f"{prefix} #{n}", "tags": "urgent" if n % 4 == 0 else "normal", "props": props}


def matching(s: dict[str, Any]) -> bool:
    p = s["props"]
    by_region = p["region"] in ("eu", "us") and "level" in p and int(p["level"]) >= 3
    return by_region or (s["tags"] == "urgent" and float(p["amount"]) > 99.5)


async def send_ours(namesrv: str, specs: list[dict[str, Any]]) -> None:
    async with Producer("PG_sql_py", namesrv, client_ip="127.0.0.1", send_timeout=10.0) as producer:
        for s in specs:
            result = await producer.send(Message(s["topic"], s["body"].encode(), tags=s["tags"], properties=s["props"]))
            assert result.status.name == "SEND_OK"


async def consume(namesrv: str, want: int) -> tuple[list[MessageRecord], list[MessageRecord]]:
    pushed: list[MessageRecord] = []

    def on_messages(msgs: list[MessageRecord], _ctx: object) -> ConsumeConcurrentlyStatus:
        pushed.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer("CG_sql_push", namesrv, client_ip="127.0.0.1", consume_from_where=FIRST)
    push.subscribe(TOPIC, EXPR, expression_type="SQL92")
    push.register_listener(on_messages)
    lite = LitePullConsumer("CG_sql_lite", namesrv, client_ip="127.0.0.1", consume_from_where=FIRST)
    lite.subscribe(TOPIC, MessageSelector.by_sql(EXPR))
    polled: list[MessageRecord] = []
    async with push, lite:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 40
        while (len(pushed) < want or len(polled) < want) and loop.time() < deadline:
            polled += await lite.poll(0.2)
        polled += await lite.poll(1.0)  # room for an extra message or a duplicate to show
    return pushed, polled


def test_cpp_and_our_messages_through_sql92_subscriptions(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", enablePropertyFilter="true")
    try:
        cluster.start()
        cpp = [spec("cpp", n) for n in range(30)]
        ours = [spec("py", n) for n in range(30)]
        [sent] = cluster.run_client([{"op": "send", "mode": "sync", "group": "PG_sql_cpp", "messages": cpp}])
        assert [r["status"] for r in sent["results"]] == ["OK"] * len(cpp)
        asyncio.run(send_ours(cluster.namesrv_addr, ours))
        cluster.wait_route(TOPIC)
        want = {s["props"][UID]: s for s in cpp + ours if matching(s)}
        assert 10 < len(want) < 50
        pushed, polled = asyncio.run(consume(cluster.namesrv_addr, len(want)))
        for name, got in (("push", pushed), ("lite pull", polled)):
            counts = collections.Counter(m.properties[UID] for m in got)
            assert all(n == 1 for n in counts.values()), f"{name}: duplicates {counts}"
            assert set(counts) == set(want), f"{name}: {sorted(set(counts) ^ set(want))}\n{cluster.explain()}"
            for m in got:
                s = want[m.properties[UID]]
                assert (m.body.decode(), m.tags) == (s["body"], s["tags"])
                assert {k: m.properties[k] for k in s["props"]} == s["props"]
    finally:
        cluster.close()
