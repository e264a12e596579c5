"""The lite pull consumer against a name server and brokers in this process (127.0.0.1), and
across a master outage with real processes (a master and its slave)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, MessageQueue, Producer
from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.protocol.message import MessageRecord
from tests.admin.servers import poll
from tests.client.cluster import Cluster, running
from tests.ha.process_group import HAGroup

pytestmark = pytest.mark.timeout(60)

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def run(root: Path, body: Callable[[Cluster], Awaitable[None]], names: tuple[str, ...] = ("broker-a",)) -> None:
    async def main() -> None:
        async with running(root, names) as cluster:
            await asyncio.wait_for(body(cluster), 30)

    asyncio.run(main())


def consumer(cluster: Cluster | str, group: str = "lite-cg", **kw: Any) -> LitePullConsumer:
    kw.setdefault("client_ip", "127.0.0.1")
    kw.setdefault("poll_timeout_millis", 3000)
    ns = cluster if isinstance(cluster, str) else cluster.ns_addr
    return LitePullConsumer(group, ns, **kw)


async def make_topic(ns_addr: str, addrs: list[str], topic: str, queues: int = 4) -> None:
    async with AdminClient(ns_addr, timeout=5.0) as admin:
        for addr in addrs:
            await admin.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)

        async def routed() -> bool:
            try:
                route = await admin.route(topic)
            except Exception:
                return False
            return len(route.queue_datas) == len(addrs)

        await poll(f"the route of {topic}", routed)


async def fill(ns_addr: str, mqs: list[MessageQueue], count: int, start: int = 0) -> None:
    """``count`` messages into each queue, bodies ``<broker>/<queue id>-<n>`` (n from ``start``),
    in order; returns once the consume queues list them (the broker dispatches after the answer)."""
    async with Producer("lite-pg", ns_addr, client_ip="127.0.0.1") as p:

        async def one_queue(mq: MessageQueue) -> None:
            for n in range(start, start + count):
                await p.send_to_queue(Message(mq.topic, f"{mq.broker_name}/{mq.queue_id}-{n}".encode()), mq)

        await asyncio.gather(*(one_queue(mq) for mq in mqs))
    async with AdminClient(ns_addr, timeout=5.0) as admin:

        async def dispatched() -> bool:
            stats = await admin.examine_topic_stats(mqs[0].topic)
            return all(stats[mq].max_offset >= start + count for mq in mqs)

        await poll("the messages in the consume queues", dispatched)


def queues(topic: str, n: int = 4, broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


async def poll_until(c: LitePullConsumer, count: int, timeout: float = 10.0) -> list[MessageRecord]:
    """Poll until ``count`` messages came (exactly: more fails)."""
    got: list[MessageRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages came"
        got += await c.poll(0.5)
    assert len(got) == count, f"{len(got)} messages came, {count} expected"
    return got


def by_queue(records: list[MessageRecord]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = collections.defaultdict(list)
    for r in records:
        out[r.queue_id].append(r.queue_offset)
    return dict(out)


async def broker_committed(c: LitePullConsumer, mq: MessageQueue) -> int | None:
    return await c.instance.pull_api.query_consumer_offset(mq, c.group)


# -- assign ----------------------------------------------------------------------------------


def test_assign_seek_and_poll_read_exact_ranges(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteSeek")
        q0, q1, q2, _ = queues("LiteSeek")
        await fill(cluster.ns_addr, [q0, q1, q2], 20)
        c = consumer(cluster, consume_from_where=FIRST, consume_message_batch_max_size=7, auto_commit=False)
        c.assign([q0, q1])
        with pytest.raises(MQClientError, match="mutually exclusive"):
            c.subscribe("LiteSeek")
        with pytest.raises(ClientStateError):
            await c.poll(0)
        async with c:
            assert c.assignment() == {q0, q1}
            await c.seek(q0, 5)
            await c.seek(q1, 12)
            got = await poll_until(c, 15 + 8)
            assert all(len(batch) <= 7 for batch in [got[i : i + 7] for i in range(0, len(got), 7)])
            assert by_queue(got) == {0: list(range(5, 20)), 1: list(range(12, 20))}
            assert all(r.body == f"broker-a/{r.queue_id}-{r.queue_offset}".encode() for r in got)
            assert await c.poll(0.2) == []
            # a seek in the middle of the stream discards the buffer and rereads from there
            await c.seek(q0, 3)
            again = await poll_until(c, 17)
            assert by_queue(again) == {0: list(range(3, 20))}
            # Java's checks: within [min, max] of the queue, and only assigned queues
            with pytest.raises(MQClientError, match=r"seek offset 21 .* outside \[min offset 0, max offset 20\]"):
                await c.seek(q0, 21)
            with pytest.raises(MQClientError, match="outside"):
                await c.seek(q0, -1)
            with pytest.raises(MQClientError, match="not in the assigned list"):
                await c.seek(q2, 0)
            await c.seek(q1, 20)  # the max offset itself is allowed: nothing more to read
            # a new assignment replaces the old one
            c.assign([q2])
            assert c.assignment() == {q2}
            third = await poll_until(c, 20)
            assert by_queue(third) == {2: list(range(20))}
            assert await c.fetch_message_queues("LiteSeek") == set(queues("LiteSeek"))
            first = third[0]
            assert await c.offset_for_timestamp(q2, first.store_timestamp) == 0
        assert not c.running

    run(tmp_path, body)


def test_seek_to_begin_and_end(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteEnds")
        q0 = queues("LiteEnds")[0]
        await fill(cluster.ns_addr, [q0], 20)
        async with consumer(cluster, auto_commit=False) as c:
            c.assign([q0])
            # (a new group with CONSUME_FROM_LAST_OFFSET starts at 0 here: the broker answers 0
            # for a queue whose first message is still in memory, as RocketMQ does)
            await c.seek_to_end(q0)
            assert await c.poll(0.5) == []
            await c.seek_to_begin(q0)
            assert by_queue(await poll_until(c, 20)) == {0: list(range(20))}
            await c.seek_to_begin(q0)
            await c.seek_to_end(q0)
            await fill(cluster.ns_addr, [q0], 3, start=20)
            assert by_queue(await poll_until(c, 3)) == {0: [20, 21, 22]}
            assert await c.poll(0.2) == []

    run(tmp_path, body)


def test_commit_and_committed_round_trip(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteCommit")
        q0, q1, _, _ = queues("LiteCommit")
        await fill(cluster.ns_addr, [q0, q1], 10)
        kw: dict[str, Any] = dict(consume_from_where=FIRST, auto_commit=False, consume_message_batch_max_size=4)
        async with consumer(cluster, "lite-commit-cg", **kw) as a:
            a.assign([q0])
            # a new group: the broker answers 0 while the queue's first message is in memory
            assert await a.committed(q0) == 0
            first = await a.poll(3)
            assert [r.queue_offset for r in first] == [0, 1, 2, 3]
            await a.commit()  # the consume offsets, written now
            assert await broker_committed(a, q0) == 4
            assert await a.committed(q0) == 4
            await a.commit({q0: 2})  # an explicit offset may go back
            assert await broker_committed(a, q0) == 2
            a.commit_sync()  # the consume offset (4) into memory only
            assert await a.committed(q0) == 4
            assert await broker_committed(a, q0) == 2
            await a.commit({q1: 7})  # assign mode: a queue not read here goes straight to the broker
            assert await broker_committed(a, q1) == 7
            with pytest.raises(ValueError):
                await a.commit({q0: -1})
        # shutdown without auto-commit persists what was committed (4), not what was polled
        async with consumer(cluster, "lite-commit-cg", **kw) as b:
            b.assign([q0, q1])
            assert await b.committed(q0) == 4
            assert await b.committed(q1) == 7
            got = await poll_until(b, 6 + 3)
            assert by_queue(got) == {0: list(range(4, 10)), 1: [7, 8, 9]}

    run(tmp_path, body)


def test_auto_commit_on_poll_and_at_shutdown(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteAuto")
        q0 = queues("LiteAuto")[0]
        await fill(cluster.ns_addr, [q0], 20)
        kw: dict[str, Any] = dict(consume_from_where=FIRST, auto_commit_interval=1.0, persist_interval=0.2)
        async with consumer(cluster, "lite-auto-cg", **kw) as a:
            a.assign([q0])
            assert len(await poll_until(a, 20)) == 20

            async def committed_20() -> bool:
                await a.poll(0.1)  # polls commit once the interval has passed; the instance persists
                return await broker_committed(a, q0) == 20

            await poll("the auto-commit of 20", committed_20, timeout=5)
            await fill(cluster.ns_addr, [q0], 5, start=20)
            assert len(await poll_until(a, 5)) == 5
        # the shutdown committed the last 5 too
        async with consumer(cluster, "lite-auto-cg") as b:
            b.assign([q0])
            assert await b.committed(q0) == 25
            await fill(cluster.ns_addr, [q0], 3, start=25)
            assert by_queue(await poll_until(b, 3)) == {0: [25, 26, 27]}

    run(tmp_path, body)


def test_pause_resume_and_poll_timeout(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LitePause")
        q0, q1, q2, _ = queues("LitePause")
        await fill(cluster.ns_addr, [q0, q1], 10)
        c = consumer(cluster, consume_from_where=FIRST, auto_commit=False)
        c.assign([q0, q1, q2])
        c.pause([q1])
        async with c:
            assert by_queue(await poll_until(c, 10)) == {0: list(range(10))}
            assert await c.poll(0.3) == []
            c.resume([q1])
            assert by_queue(await poll_until(c, 10)) == {1: list(range(10))}
            # nothing buffered: poll waits its timeout, then returns []
            started = time.monotonic()
            assert await asyncio.wait_for(c.poll(0.5), 30) == []
            assert time.monotonic() - started >= 0.5 - 0.01  # not before its timeout
            assert await c.poll(0) == []
            # a message stored while poll waits comes at once (long polling), not at the timeout
            waiting = asyncio.create_task(c.poll(120))
            await asyncio.sleep(0.1)
            await fill(cluster.ns_addr, [q2], 1)
            got = await asyncio.wait_for(waiting, 60)  # half its timeout: the arrival ended it
            assert [(r.queue_id, r.queue_offset) for r in got] == [(2, 0)]
            with pytest.raises(ValueError):
                await c.poll(-1)
            # a paused queue keeps what was buffered for it; poll still returns that
            await fill(cluster.ns_addr, [q0], 5, start=10)
            await poll("q0's new messages buffered", lambda: _buffered(c, 5))
            c.pause([q0])
            assert by_queue(await poll_until(c, 5)) == {0: list(range(10, 15))}

    run(tmp_path, body)


async def _buffered(c: LitePullConsumer, n: int) -> bool:
    return c._buffer.count >= n


def test_flow_control_bounds_the_buffer_and_failed_pulls_back_off(tmp_path: Path, caplog: Any) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteFlow")
        q0, q1, _, _ = queues("LiteFlow")
        await fill(cluster.ns_addr, [q0, q1], 40)
        kw: dict[str, Any] = dict(
            consume_from_where=FIRST,
            auto_commit=False,
            pull_batch_size=4,
            pull_threshold_for_queue=6,
            pull_time_delay_millis_when_exception=100,
        )
        async with consumer(cluster, **kw) as c:
            pull_api = c.instance.pull_api
            real_pull = pull_api.pull
            failures = {"left": 3}

            async def flaky(*args: Any, **kwargs: Any) -> Any:
                if failures["left"] > 0:
                    failures["left"] -= 1
                    raise RuntimeError("injected pull failure")
                return await real_pull(*args, **kwargs)

            pull_api.pull = flaky  # type: ignore[method-assign]
            c.assign([q0, q1])
            await poll("both queues buffered up to their limit", lambda: _buffered(c, 2 * 8))
            await asyncio.sleep(0.3)  # readers are held back: the buffer does not grow
            assert c._buffer.count <= 2 * (6 + 4)
            assert failures["left"] == 0
            got = await poll_until(c, 80)
            assert by_queue(got) == {0: list(range(40)), 1: list(range(40))}
        assert "injected pull failure" in caplog.text

    run(tmp_path, body)


def test_topic_queue_change_listener(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteMeta", queues=2)
        seen: list[tuple[str, set[MessageQueue]]] = []

        async def listener(topic: str, mqs: set[MessageQueue]) -> None:
            seen.append((topic, mqs))

        async with consumer(cluster, topic_metadata_check_interval=0.2) as c:
            c.register_topic_message_queue_change_listener("LiteMeta", listener)
            await asyncio.sleep(0.5)
            assert seen == []  # the queues known at registration are the baseline
            await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteMeta", queues=4)

            async def changed() -> bool:
                return bool(seen) and seen[-1] == ("LiteMeta", set(queues("LiteMeta")))

            await poll("the listener to see 4 queues", changed, timeout=5)

    run(tmp_path, body)


# -- subscribe -------------------------------------------------------------------------------


def test_subscribe_two_members_split_the_queues_and_read_each_message_once(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        topic = "LiteGroup"
        await make_topic(cluster.ns_addr, [cluster.addr("broker-a"), cluster.addr("broker-b")], topic)
        all_queues = set(queues(topic, 4, "broker-a")) | set(queues(topic, 4, "broker-b"))
        changes: list[tuple[str, set[MessageQueue], set[MessageQueue]]] = []
        kw: dict[str, Any] = dict(rebalance_interval=1.0, persist_interval=0.5)
        c1 = consumer(cluster, "lite-group-cg", **kw)
        c2 = consumer(cluster, "lite-group-cg", **kw)
        c1.subscribe(topic, "*", lambda t, mq_all, mine: changes.append((t, mq_all, mine)))
        c2.subscribe(topic)
        with pytest.raises(MQClientError, match="mutually exclusive"):
            c1.assign(all_queues)
        async with c1, c2:

            async def split() -> bool:
                a, b = c1.assignment(), c2.assignment()
                return len(a) == 4 and len(b) == 4 and a | b == all_queues

            await poll("the group's queues split between the two members", split)
            assert changes and changes[-1][0] == topic and changes[-1][1] == all_queues
            assert changes[-1][2] == c1.assignment()
            assert c1.consumer_data()["subscriptionDataSet"][0]["topic"] == topic
            assert c1.consumer_data()["consumeType"] == "CONSUME_ACTIVELY"
            await fill(cluster.ns_addr, sorted(all_queues), 25)  # 200 messages
            seen: collections.Counter[str] = collections.Counter()
            owner: dict[str, set[MessageQueue]] = {"c1": c1.assignment(), "c2": c2.assignment()}
            deadline = time.monotonic() + 15
            while sum(seen.values()) < 200 and time.monotonic() < deadline:
                r1, r2 = await asyncio.gather(c1.poll(0.3), c2.poll(0.3))
                for name, records in (("c1", r1), ("c2", r2)):
                    for r in records:
                        assert MessageQueue(topic, r.broker_name, r.queue_id) in owner[name]
                        seen[r.msg_id] += 1
            assert sum(seen.values()) == 200 and len(seen) == 200, f"{len(seen)} distinct of {sum(seen.values())}"
            assert await c1.poll(0.2) == [] and await c2.poll(0.2) == []
            # one member leaves: the other takes its queues over from the committed offsets
            await c2.shutdown()
            await poll("c1 to own all queues", lambda: _owns(c1, all_queues))
            await fill(cluster.ns_addr, sorted(all_queues), 1, start=25)
            got = await poll_until(c1, 8)
            assert {r.queue_offset for r in got} == {25}
            c1.unsubscribe(topic)
            assert c1.assignment() == set()

    run(tmp_path, body, names=("broker-a", "broker-b"))


async def _owns(c: LitePullConsumer, mqs: set[MessageQueue]) -> bool:
    return c.assignment() == mqs


def test_broadcasting_members_each_read_everything(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        from ledgermq.client.consumer.common import MessageModel

        await make_topic(cluster.ns_addr, [cluster.addr("broker-a")], "LiteBcast", queues=2)
        kw: dict[str, Any] = dict(
            message_model=MessageModel.BROADCASTING, consume_from_where=FIRST, local_offset_store_dir=str(tmp_path)
        )
        c1 = consumer(cluster, "lite-bcast-cg", instance_name="one", **kw)
        c2 = consumer(cluster, "lite-bcast-cg", instance_name="two", **kw)
        for c in (c1, c2):
            c.subscribe("LiteBcast")
        await fill(cluster.ns_addr, queues("LiteBcast", 2), 5)
        async with c1, c2:
            for c in (c1, c2):
                assert by_queue(await poll_until(c, 10)) == {0: list(range(5)), 1: list(range(5))}
            await c1.commit()
        assert (tmp_path / "127.0.0.1@one" / "lite-bcast-cg" / "offsets.json").exists()

    run(tmp_path, body)


# -- a master outage, with real processes ----------------------------------------------------


def test_poll_goes_on_from_the_slave_while_the_master_is_down(tmp_path: Path) -> None:
    group = HAGroup(tmp_path, slaveSyncInterval=1000)
    master = group.add("m", 0, "ASYNC_MASTER")
    slave = group.add("s", 1, "SLAVE")
    topic = "LiteFailover"
    total = 4 * 60
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)

        async def main() -> None:
            await make_topic(group.namesrv_addr, [master.addr], topic)
            mqs = [MessageQueue(topic, "broker-ha", i) for i in range(4)]
            await fill(group.namesrv_addr, mqs, total // 4)
            await asyncio.to_thread(group.wait_caught_up, master, [slave], 20)
            kw: dict[str, Any] = dict(
                consume_from_where=FIRST,
                pull_batch_size=4,
                pull_threshold_for_queue=8,  # little is buffered: most must be pulled after the kill
                consume_message_batch_max_size=8,
                persist_interval=0.5,
                auto_commit_interval=1.0,
            )
            async with consumer(group.namesrv_addr, "lite-failover-cg", **kw) as c:
                c.subscribe(topic)
                seen: collections.Counter[str] = collections.Counter()
                while sum(seen.values()) < 40:
                    for r in await c.poll(1):
                        seen[r.msg_id] += 1
                group.kill(master)
                killed_at = sum(seen.values())
                deadline = time.monotonic() + 25
                while len(seen) < total and time.monotonic() < deadline:
                    for r in await c.poll(1):
                        seen[r.msg_id] += 1
                assert len(seen) == total, f"{len(seen)} of {total} messages read ({killed_at} before the kill)"
                assert killed_at < total - 100
                assert c.instance.pull_api.routes.master_addr("broker-ha") is None
                # offsets are committed to the slave while the master is away
                await poll("a commit on the slave", lambda: _committed_somewhere(c, mqs))

        asyncio.run(asyncio.wait_for(main(), 50))
    finally:
        group.close()


async def _committed_somewhere(c: LitePullConsumer, mqs: list[MessageQueue]) -> bool:
    await c.poll(0.1)
    offsets = [await c.instance.pull_api.query_consumer_offset(mq, c.group) for mq in mqs]
    return sum(o or 0 for o in offsets) > 0
