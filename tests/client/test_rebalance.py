"""RebalanceImpl against a fake broker API: allocation, table updates, start offsets, locks."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field

import pytest

from ledgermq.client.consumer.allocate import AllocateMessageQueueAveragely
from ledgermq.client.consumer.common import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
    parse_consume_timestamp,
    retry_topic,
)
from ledgermq.client.consumer.offset_store import RemoteOffsetStore
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.consumer.rebalance import PullRequest, RebalanceImpl, RebalanceSettings
from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.clock import ManualClock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord


def aio(fn: Callable[[], Coroutine[None, None, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop, bounded."""

    @functools.wraps(fn)
    def run() -> None:
        asyncio.run(asyncio.wait_for(fn(), 20))

    return run


T = "TopicA"
GROUP = "cg"
ME = "10.0.0.1@me"
OTHER = "10.0.0.2@other"


def queues(topic: str = T, n: int = 4, brokers: Sequence[str] = ("broker-a",)) -> list[MessageQueue]:
    return [MessageQueue(topic, b, i) for b in brokers for i in range(n)]


@dataclass
class FakeRoutes:
    table: dict[str, list[MessageQueue]] = field(default_factory=dict)
    fail: set[str] = field(default_factory=set)

    async def find_subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        if topic in self.fail or topic not in self.table:
            raise MQClientError(f"no route of {topic}")
        return list(self.table[topic])


@dataclass
class FakeAPI:
    """The broker side of a rebalance, in memory."""

    fake_routes: FakeRoutes = field(default_factory=FakeRoutes)
    cids: list[str] | None = field(default_factory=lambda: [ME])
    max_offsets: dict[MessageQueue, int] = field(default_factory=dict)
    by_time: dict[MessageQueue, int] = field(default_factory=dict)
    searched: list[tuple[MessageQueue, int]] = field(default_factory=list)
    max_offset_fails: bool = False
    lockable: set[MessageQueue] | None = None  # None: every queue can be locked
    lock_calls: list[set[MessageQueue]] = field(default_factory=list)
    unlock_calls: list[tuple[set[MessageQueue], bool]] = field(default_factory=list)

    @property
    def routes(self) -> FakeRoutes:
        return self.fake_routes

    async def consumer_ids(self, topic: str, group: str) -> list[str]:
        if self.cids is None:
            raise MQConnectError("no broker", "127.0.0.1:1")
        return list(self.cids)

    async def max_offset(self, mq: MessageQueue) -> int:
        if self.max_offset_fails:
            raise MQConnectError("timeout", "127.0.0.1:1", timeout=True)
        return self.max_offsets.get(mq, 100)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        self.searched.append((mq, timestamp_ms))
        return self.by_time.get(mq, 7)

    async def lock_batch(
        self, broker_name: str, topic: str, group: str, client_id: str, mqs: Collection[MessageQueue]
    ) -> set[MessageQueue]:
        self.lock_calls.append(set(mqs))
        return {mq for mq in mqs if self.lockable is None or mq in self.lockable}

    async def unlock_batch(
        self,
        broker_name: str,
        topic: str,
        group: str,
        client_id: str,
        mqs: Collection[MessageQueue],
        *,
        oneway: bool,
    ) -> None:
        self.unlock_calls.append((set(mqs), oneway))


@dataclass
class FakeOffsetBroker:
    committed: dict[MessageQueue, int] = field(default_factory=dict)
    unreadable: set[MessageQueue] = field(default_factory=set)
    commits: list[tuple[MessageQueue, int]] = field(default_factory=list)

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int | None:
        if mq in self.unreadable:
            raise MQConnectError("down", "127.0.0.1:1")
        return self.committed.get(mq)

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int, *, oneway: bool) -> None:
        self.commits.append((mq, offset))
        self.committed[mq] = offset


@dataclass
class Recorder:
    changes: list[tuple[str, frozenset[MessageQueue], frozenset[MessageQueue]]] = field(default_factory=list)
    requests: list[PullRequest] = field(default_factory=list)

    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        self.changes.append((topic, mq_all, mq_divided))

    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        self.requests.extend(requests)


@dataclass
class Setup:
    api: FakeAPI
    broker: FakeOffsetBroker
    store: RemoteOffsetStore
    rec: Recorder
    reb: RebalanceImpl
    clock: ManualClock


def make(
    *,
    topics: dict[str, list[MessageQueue]] | None = None,
    model: MessageModel = MessageModel.CLUSTERING,
    where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY,
    timestamp: str | int | None = None,
) -> Setup:
    topics = {T: queues()} if topics is None else topics
    api = FakeAPI(FakeRoutes(dict(topics)))
    broker = FakeOffsetBroker()
    store = RemoteOffsetStore(broker, GROUP, client_id=ME)
    rec = Recorder()
    clock = ManualClock()
    settings = RebalanceSettings(
        group=GROUP,
        client_id=ME,
        message_model=model,
        allocate_strategy=AllocateMessageQueueAveragely(),
        consume_from_where=where,
        consume_timestamp=timestamp,
        consume_type=consume_type,
        unlock_delay=0.05,
    )
    subscriptions = {t: SubscriptionData.build(t, "*") for t in topics}
    reb = RebalanceImpl(settings, api, store, subscriptions, listener=rec, clock=clock)
    return Setup(api, broker, store, rec, reb, clock)


def msg(offset: int, body: bytes = b"x") -> MessageRecord:
    return MessageRecord(topic=T, body=body, queue_offset=offset)


@aio
async def test_clustering_takes_its_share_and_gives_it_up_when_a_member_joins() -> None:
    s = make()
    s.api.cids = [OTHER, ME]  # sorted: "10.0.0.1@me" first
    s.broker.committed[MessageQueue(T, "broker-a", 0)] = 5
    await s.reb.do_rebalance(False)
    mine = {MessageQueue(T, "broker-a", 0), MessageQueue(T, "broker-a", 1)}
    assert set(s.reb.process_queue_table) == mine
    assert {(r.message_queue, r.next_offset) for r in s.rec.requests} == {
        (MessageQueue(T, "broker-a", 0), 5),
        (MessageQueue(T, "broker-a", 1), 100),  # never consumed: CONSUME_FROM_LAST_OFFSET = max offset
    }
    assert s.rec.changes == [(T, frozenset(queues()), frozenset(mine))]

    # the same inputs again: no change, no new request
    await s.reb.do_rebalance(False)
    assert len(s.rec.requests) == 2 and len(s.rec.changes) == 1

    # a third member sorts before us: we keep only queue 1
    s.api.cids = ["10.0.0.0@first", ME, OTHER]
    pq0 = s.reb.process_queue_table[MessageQueue(T, "broker-a", 0)]
    s.store.update_offset(MessageQueue(T, "broker-a", 0), 9, increase_only=True)
    await s.reb.do_rebalance(False)
    assert set(s.reb.process_queue_table) == {MessageQueue(T, "broker-a", 2)}  # [q0 q1] [q2] [q3]
    assert pq0.dropped
    # the dropped queue's offset was persisted and forgotten
    assert (MessageQueue(T, "broker-a", 0), 9) in s.broker.commits
    assert MessageQueue(T, "broker-a", 0) not in s.store.clone_offset_table()
    assert len(s.rec.changes) == 2


@aio
async def test_allocation_matches_averagely_for_every_member() -> None:
    members = ["c@1", "c@2", "c@3"]
    seen: list[MessageQueue] = []
    for cid in members:
        s = make(topics={T: queues(n=4, brokers=("broker-b", "broker-a"))})
        s.reb.settings = dataclasses.replace(s.reb.settings, client_id=cid)
        s.api.cids = list(reversed(members))
        await s.reb.do_rebalance(False)
        seen.extend(s.reb.process_queue_table)
    assert sorted(seen) == sorted(queues(n=4, brokers=("broker-a", "broker-b")))


@aio
async def test_unknown_members_or_route_change_nothing() -> None:
    s = make()
    await s.reb.do_rebalance(False)
    assert len(s.reb.process_queue_table) == 4
    s.api.cids = None  # the consumer list cannot be had
    await s.reb.do_rebalance(False)
    assert len(s.reb.process_queue_table) == 4
    s.api.cids = []  # the brokers know no member yet
    await s.reb.do_rebalance(False)
    assert len(s.reb.process_queue_table) == 4
    s.api.cids = [ME]
    s.api.fake_routes.fail.add(T)  # the route lookup fails: the last known queues are used
    await s.reb.do_rebalance(False)
    assert len(s.reb.process_queue_table) == 4
    assert len(s.rec.changes) == 1


@aio
async def test_a_client_missing_from_the_members_drops_everything() -> None:
    s = make()
    await s.reb.do_rebalance(False)
    s.api.cids = [OTHER]
    await s.reb.do_rebalance(False)
    assert s.reb.process_queue_table == {}
    assert s.rec.changes[-1][2] == frozenset()


@aio
async def test_broadcasting_takes_every_queue_without_asking_for_members() -> None:
    s = make(model=MessageModel.BROADCASTING)
    s.api.cids = None
    await s.reb.do_rebalance(False)
    assert set(s.reb.process_queue_table) == set(queues())
    assert s.rec.changes == [(T, frozenset(queues()), frozenset(queues()))]


@aio
async def test_start_offsets_follow_consume_from_where() -> None:
    q = MessageQueue(T, "broker-a", 0)
    rq = MessageQueue(retry_topic(GROUP), "broker-a", 0)

    async def start(where: ConsumeFromWhere, mq: MessageQueue, **kw: int | str) -> tuple[int, Setup]:
        s = make(where=where, **kw)  # type: ignore[arg-type]
        s.api.max_offsets[mq] = 42
        return await s.reb.compute_pull_from_where(mq), s

    assert (await start(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, q))[0] == 42
    assert (await start(ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET, q))[0] == 42
    assert (await start(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, rq))[0] == 0
    assert (await start(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, q))[0] == 0
    assert (await start(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, rq))[0] == 0
    off, s = await start(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, q, timestamp="20240102030405")
    assert off == 7 and s.api.searched == [(q, parse_consume_timestamp("20240102030405"))]
    off, s = await start(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, q, timestamp=1_700_000_000_123)
    assert s.api.searched == [(q, 1_700_000_000_123)]
    off, s = await start(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, rq)
    assert off == 42 and s.api.searched == []
    # default timestamp: half an hour before the clock's now
    off, s = await start(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, q)
    assert s.api.searched == [(q, s.clock.wall_ms() - 30 * 60 * 1000)]

    # a stored offset wins over everything
    s = make(where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    s.broker.committed[q] = 11
    assert await s.reb.compute_pull_from_where(q) == 11
    # the store cannot be read: -1, do not guess
    s.broker.unreadable.add(q)
    assert await s.reb.compute_pull_from_where(q) == -1


@aio
async def test_queues_without_a_start_offset_wait_for_the_next_round() -> None:
    s = make()
    q0 = MessageQueue(T, "broker-a", 0)
    s.broker.unreadable.add(q0)
    s.api.max_offset_fails = True
    await s.reb.do_rebalance(False)
    assert s.reb.process_queue_table == {}
    assert s.rec.changes == []
    s.api.max_offset_fails = False
    await s.reb.do_rebalance(False)
    assert set(s.reb.process_queue_table) == set(queues()) - {q0}
    s.broker.unreadable.clear()
    await s.reb.do_rebalance(False)
    assert set(s.reb.process_queue_table) == set(queues())
    assert len(s.rec.requests) == 4


@aio
async def test_unsubscribed_topics_are_dropped() -> None:
    s = make(topics={T: queues(), "TopicB": queues("TopicB", 2)})
    await s.reb.do_rebalance(False)
    assert len(s.reb.process_queue_table) == 6
    pqs = [pq for mq, pq in s.reb.process_queue_table.items() if mq.topic == "TopicB"]
    del s.reb.subscriptions["TopicB"]
    await s.reb.do_rebalance(False)
    assert {mq.topic for mq in s.reb.process_queue_table} == {T}
    assert all(pq.dropped for pq in pqs)


@aio
async def test_a_queue_not_pulled_for_long_is_recreated_for_push_only() -> None:
    for consume_type, recreated in ((ConsumeType.CONSUME_PASSIVELY, True), (ConsumeType.CONSUME_ACTIVELY, False)):
        s = make(consume_type=consume_type)
        await s.reb.do_rebalance(False)
        before = dict(s.reb.process_queue_table)
        s.clock.advance(121)
        await s.reb.do_rebalance(False)
        after = s.reb.process_queue_table
        assert set(after) == set(before)
        assert all((after[mq] is not pq) == recreated for mq, pq in before.items())
        assert all(pq.dropped == recreated for pq in before.values())


@aio
async def test_orderly_locks_new_queues_and_unlocks_dropped_ones() -> None:
    s = make()
    q = queues()
    s.api.lockable = {q[0], q[1], q[2]}
    await s.reb.do_rebalance(True)
    assert set(s.reb.process_queue_table) == {q[0], q[1], q[2]}  # q3's lock was refused
    assert not any(r.previously_locked for r in s.rec.requests)  # the first pull re-reads the offset
    assert all(pq.locked for pq in s.reb.process_queue_table.values())

    # lock_all renews and notices a lost lock
    s.api.lockable = {q[0], q[2]}
    await s.reb.lock_all()
    assert {mq for mq, pq in s.reb.process_queue_table.items() if pq.locked} == {q[0], q[2]}

    # a new member takes q2 and q3: q2 (empty) is unlocked at once, q1 stays
    s.api.cids = [ME, OTHER]
    s.api.lockable = None
    await s.reb.do_rebalance(True)
    assert set(s.reb.process_queue_table) == {q[0], q[1]}
    assert ({q[2]}, True) in s.api.unlock_calls

    # a queue with cached messages is unlocked only after the delay
    s.reb.process_queue_table[q[1]].put_message([msg(3)])
    s.api.cids = [ME, "10.0.0.0@a", OTHER, "10.0.0.3@x"]  # sorted: 10.0.0.0@a first -> we get q1 only
    s.api.unlock_calls.clear()
    await s.reb.do_rebalance(True)
    assert set(s.reb.process_queue_table) == {q[1]}
    assert s.api.unlock_calls == [({q[0]}, True)]
    s.reb.process_queue_table[q[1]].put_message([msg(4)])
    s.api.cids = [OTHER]
    await s.reb.do_rebalance(True)
    assert s.reb.process_queue_table == {}
    assert ({q[1]}, True) not in s.api.unlock_calls
    for _ in range(100):
        if ({q[1]}, True) in s.api.unlock_calls:
            break
        await asyncio.sleep(0.01)
    assert ({q[1]}, True) in s.api.unlock_calls


@aio
async def test_orderly_removal_waits_for_a_running_batch() -> None:
    s = make()
    await s.reb.do_rebalance(True)
    q0 = MessageQueue(T, "broker-a", 0)
    pq = s.reb.process_queue_table[q0]
    await pq.consume_lock.acquire()  # a batch is in the listener
    s.api.cids = ["10.0.0.0@a", ME]  # q0 and q1 go to the other member
    s.reb.consume_lock_wait = 0.05
    await s.reb.do_rebalance(True)
    assert q0 in s.reb.process_queue_table and pq.dropped and pq.try_unlock_times == 1
    pq.consume_lock.release()
    await s.reb.do_rebalance(True)
    assert q0 not in s.reb.process_queue_table


@aio
async def test_orderly_removal_cancelled_as_the_batch_ends_is_cancelled() -> None:
    # The running batch releases the queue's consume lock in the iteration where shutdown
    # cancels the rebalance: the cancel must reach the rebalance (3.11's wait_for kept the
    # lock instead and went on, and the instance's shutdown waited for its loop forever).
    s = make()
    await s.reb.do_rebalance(True)
    q0 = MessageQueue(T, "broker-a", 0)
    pq = s.reb.process_queue_table[q0]
    await pq.consume_lock.acquire()
    task = asyncio.create_task(s.reb.remove_unnecessary_message_queue(q0, pq, True))
    await asyncio.sleep(0)  # waiting for the lock
    pq.consume_lock.release()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pq.consume_lock.locked()


@aio
async def test_close_releases_pending_delayed_unlocks_and_remove_process_queue() -> None:
    s = make()
    s.reb.settings = dataclasses.replace(s.reb.settings, unlock_delay=60)
    await s.reb.do_rebalance(True)
    q = queues()
    s.reb.process_queue_table[q[3]].put_message([msg(1)])
    s.api.cids = [ME, OTHER]
    await s.reb.do_rebalance(True)
    assert ({q[3]}, True) not in s.api.unlock_calls
    await s.reb.remove_process_queue(q[0])
    assert q[0] not in s.reb.process_queue_table
    await s.reb.close()
    assert ({q[3]}, True) in s.api.unlock_calls
    assert s.reb.process_queue_table == {}


@aio
async def test_unlock_all_clears_lock_flags() -> None:
    s = make(topics={T: queues(n=2, brokers=("broker-a", "broker-b"))})
    await s.reb.do_rebalance(True)
    await s.reb.unlock_all(oneway=False)
    assert sorted(len(m) for m, _ in s.api.unlock_calls) == [2, 2]
    assert not any(pq.locked for pq in s.reb.process_queue_table.values())


def test_subscription_data_json_and_tags() -> None:
    sub = SubscriptionData.build(T, " a || b ||a", sub_version=5)
    assert sub.to_json() == {
        "classFilterMode": False,
        "codeSet": [97, 98],
        "expressionType": "TAG",
        "subString": " a || b ||a",  # as written: Java's FilterAPI keeps the text
        "subVersion": 5,
        "tagsSet": ["a", "b"],
        "topic": T,
    }
    assert sub.matches_tag("a") and not sub.matches_tag("c") and not sub.matches_tag(None)
    star = SubscriptionData.build(T, "", sub_version=1)
    assert star.sub_string == "*" and star.matches_all and star.matches_tag(None)


def test_rebalance_accepts_the_real_pull_api() -> None:
    # a typing-level check made at runtime: the attributes RebalanceImpl uses exist
    from ledgermq.client.instance.pull_api import PullAPI

    for name in ("consumer_ids", "max_offset", "search_offset", "lock_batch", "unlock_batch"):
        assert callable(getattr(PullAPI, name))
    assert isinstance(ProcessQueue().consume_lock, asyncio.Lock)
    assert MQBrokerError is not None


@pytest.mark.parametrize("n_msgs", [0, 3])
def test_process_queue_basics_used_by_rebalance(n_msgs: int) -> None:
    pq = ProcessQueue()
    pq.put_message([msg(i) for i in range(n_msgs)])
    assert pq.has_temp_message() == bool(n_msgs)


@aio
async def test_an_illegal_offset_is_not_fixed_for_a_queue_rebalanced_away() -> None:
    import logging
    from typing import cast

    from ledgermq.client.consumer.parts import BackgroundTasks, ConsumerParts
    from ledgermq.client.instance.client_instance import ClientInstance
    from ledgermq.client.push.consume_service import ConsumeMessageService
    from ledgermq.client.push.pull_loop import PullLoops
    from ledgermq.client.push.settings import PushSettings
    from ledgermq.client.push.state import PushState

    s = make()
    await s.reb.do_rebalance(False)
    q0 = MessageQueue(T, "broker-a", 0)
    pq = s.reb.process_queue_table[q0]
    pq.dropped = True  # the pull answered OFFSET_ILLEGAL; the fix is due in 10 s
    s.store.update_offset(q0, 3, increase_only=False)
    settings = PushSettings(group=GROUP, namesrv_addrs="127.0.0.1:9876", offset_illegal_fix_delay=0)
    parts = ConsumerParts(cast(ClientInstance, None), s.store, s.reb)  # the fix-up needs no instance
    service = cast(ConsumeMessageService, None)  # nor a consume service
    pulls = PullLoops(PushState(settings, ManualClock()), parts, service, BackgroundTasks(GROUP, logging.getLogger()))
    s.api.cids = ["10.0.0.0@a", ME]  # meanwhile q0 went to another member
    await s.reb.do_rebalance(False)
    s.broker.commits.clear()
    s.broker.committed[q0] = 40  # the new owner's progress
    await pulls.fix_offset_later(q0, pq, 90)
    assert s.broker.committed[q0] == 40 and s.broker.commits == []
    assert q0 not in s.store.clone_offset_table()

    s.api.cids = [ME]  # and then back to us, pulled afresh
    await s.reb.do_rebalance(False)
    fresh = s.reb.process_queue_table[q0]
    await pulls.fix_offset_later(q0, pq, 90)
    assert s.reb.process_queue_table.get(q0) is fresh and not fresh.dropped
    assert s.broker.committed[q0] == 40
