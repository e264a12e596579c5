"""A push consumer's subscription reaches brokers through heartbeats, as with RocketMQ's Java
client (``postSubscriptionWhenPull`` false): steady pulls do not carry it, a changed one is
heartbeated at once, and a broker that has lost it (a restart) is sent it with the next
pull instead of refusing pulls until the next heartbeat. Against an in-process name server
and broker on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.instance.announcements import Announcements, versions_in_heartbeat
from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.header_codec import RequestHeader
from ledgermq.protocol.headers_pull import FLAG_SUBSCRIPTION, PullMessageRequestHeader
from tests.client.cluster import running
from tests.client.consumer_cluster import Collector, aio, consumer, send_many, wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def spy_pulls(c: PushConsumer, topic: str) -> list[PullMessageRequestHeader]:
    """The PULL_MESSAGE headers the consumer sends for ``topic`` from now on."""
    api = c.pull_api
    real = api.invoke
    sent: list[PullMessageRequestHeader] = []

    async def invoke(addr: str, code: int, header: RequestHeader | None, *args: Any, **kw: Any) -> RemotingCommand:
        if code == RequestCode.PULL_MESSAGE and isinstance(header, PullMessageRequestHeader) and header.topic == topic:
            sent.append(header)
        return await real(addr, code, header, *args, **kw)

    api.invoke = invoke  # type: ignore[method-assign]
    return sent


def posted(headers: list[PullMessageRequestHeader]) -> list[bool]:
    return [bool(h.sys_flag & FLAG_SUBSCRIPTION) for h in headers]


@aio(60)
async def test_steady_pulls_leave_the_subscription_to_the_heartbeat(tmp_path: Path) -> None:
    topic = "SubByBeat"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create", tags="x"))
        col = Collector()
        c = consumer("cg-beat", cl.ns_addr, consume_from_where=FIRST, heartbeat_interval=60.0)
        c.subscribe(topic, "a || b")
        c.register_listener(col.listener("c"))
        await c.start()
        sent = spy_pulls(c, topic)
        try:
            wanted = await send_many(producer, topic, 6, tags="a") | await send_many(producer, topic, 6, tags="b")
            await send_many(producer, topic, 6, tags="c")
            await col.wait_ids(wanted)
            await wait_until("pulls after the deliveries", lambda: len(sent) >= 8)
        finally:
            await c.shutdown()
        assert {s.tags for s in col.seen} == {"a", "b"}, "the broker filtered by the heartbeat's subscription"
        # Pulls racing the first heartbeats carry it; once the broker has it, none does.
        flags = posted(sent)
        settled = flags.index(False)
        assert not any(flags[settled:]), "pulls to a broker holding the subscription do not carry it"
        assert len(flags) - settled >= 4
        assert {h.subscription for h in sent[settled:]} == {None}


@aio(60)
async def test_a_changed_subscription_reaches_the_broker_at_once(tmp_path: Path) -> None:
    topic = "SubChange"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create", tags="x"))
        col = Collector()
        c = consumer("cg-change", cl.ns_addr, consume_from_where=FIRST, heartbeat_interval=60.0)
        c.subscribe(topic, "a")
        c.register_listener(col.listener("c"))
        await c.start()
        broker = cl.brokers["broker-a"].broker
        try:
            first = await send_many(producer, topic, 3, tags="a")
            await col.wait_ids(first)
            c.subscribe(topic, "b")  # a 60 s heartbeat interval: only the change's heartbeat can tell
            await wait_until(
                "the broker holding the new subscription",
                lambda: (s := broker.consumers.subscription("cg-change", topic)) is not None and s.sub_string == "b",
                timeout=5.0,
            )
            later = await send_many(producer, topic, 3, tags="b")
            await col.wait_ids(later, timeout=15)
        finally:
            await c.shutdown()


@aio(60)
async def test_a_broker_that_lost_the_subscription_is_sent_it_with_the_next_pull(tmp_path: Path) -> None:
    """Java's client would see SUBSCRIPTION_NOT_EXIST until its next heartbeat (30 s)."""
    topic = "SubLost"
    async with running(tmp_path) as cl, Producer("pg", cl.ns_addr) as producer:
        await producer.send(Message(topic, b"create", tags="x"))
        col = Collector()
        c = consumer("cg-lost", cl.ns_addr, consume_from_where=FIRST, heartbeat_interval=60.0)
        c.subscribe(topic, "a")
        c.register_listener(col.listener("c"))
        await c.start()
        broker = cl.brokers["broker-a"].broker
        try:
            await col.wait_ids(await send_many(producer, topic, 2, tags="a"))
            sent = spy_pulls(c, topic)
            broker.consumers.groups.pop("cg-lost")  # what a restarted broker knows of the group
            later = await send_many(producer, topic, 4, tags="a")
            await col.wait_ids(later, timeout=15)
        finally:
            await c.shutdown()
        assert any(posted(sent)), "after the refusal a pull carried the subscription"
        assert {h.subscription for h in sent if h.sys_flag & FLAG_SUBSCRIPTION} == {"a"}


def test_the_announcements_ledger() -> None:
    doc = [
        {"groupName": "g", "subscriptionDataSet": [{"topic": "T", "subVersion": 5}, {"topic": "U", "subVersion": 2}]},
        {"groupName": "h", "subscriptionDataSet": []},
    ]
    versions = versions_in_heartbeat(doc)
    assert versions == {("g", "T"): 5, ("g", "U"): 2}
    ledger = Announcements()
    assert not ledger.holds("b:1", "g", "T", 0)
    ledger.accepted("b:1", versions)
    assert ledger.holds("b:1", "g", "T", 5) and ledger.holds("b:1", "g", "T", 4)
    assert not ledger.holds("b:1", "g", "T", 6)  # changed since: send it
    assert not ledger.holds("b:2", "g", "T", 5)  # another broker has not answered yet
    ledger.accepted("b:1", {("g", "T"): 3})  # an older heartbeat answered late: the version stays
    assert ledger.holds("b:1", "g", "T", 5)
    assert not ledger.holds("b:1", "g", "U", 2)  # a topic no longer announced
    ledger.forget("b:1")
    assert not ledger.holds("b:1", "g", "T", 5)
