"""Which queues this consumer reads, and from where (RocketMQ 4.9.7 ``RebalanceImpl`` with
``RebalancePushImpl``'s and ``RebalanceLitePullImpl``'s start-offset rules).

Every member of a group runs ``do_rebalance`` on its own (every 20 s, when a broker says
the group's members changed, and at start). Per subscribed topic:

* BROADCASTING: every readable queue of the topic is ours;
* CLUSTERING: the topic's queues and the group's client ids, both sorted the way Java
  sorts them, go through the allocation strategy, which gives each member a disjoint
  share as long as all members see the same inputs.

The result updates the assigned-queue table (queue -> ``ProcessQueue``):

* a queue no longer ours is marked dropped (its pull loop and consumers stop), its offset
  is persisted and forgotten, and for orderly clustering consumption its broker lock is
  released (later, if messages are still cached, so a consumer finishing its batch is not
  overtaken by the new owner);
* a queue pulled from nothing for ``PULL_MAX_IDLE_TIME`` is dropped and re-created
  (push consumers only: a stuck pull loop is repaired that way);
* a new queue gets its start offset from ``compute_pull_from_where`` (the stored offset,
  else CONSUME_FROM_LAST/FIRST/TIMESTAMP); orderly consumption first takes the broker lock,
  and a queue whose lock or offset cannot be had is skipped until the next round.

What differs between the push and the lite pull consumer is plugged in through a
``RebalanceListener`` (told when a topic's assignment changed and handed the new queues'
pull requests) and two settings (``consume_type`` and ``read_type``). Subclasses may
override any public method as well.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ledgermq.client.consumer.allocate import (
    AllocateMessageQueueAveragely,
    AllocateStrategy,
    java_string_sort_key,
    message_queue_sort_key,
)
from ledgermq.client.consumer.common import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
    is_retry_topic,
    parse_consume_timestamp,
)
from ledgermq.client.consumer.offset_store import NO_OFFSET, OffsetStore, ReadOffsetType
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.util.ratelog import limited

__all__ = [
    "UNLOCK_DELAY",
    "PullRequest",
    "RebalanceAPI",
    "RebalanceImpl",
    "RebalanceListener",
    "SubscribeQueues",
]

log = logging.getLogger(__name__)

UNLOCK_DELAY = 20.0
"""Seconds an orderly queue keeps its broker lock after it was rebalanced away while it
still had cached messages (``rocketmq.client.unlockDelayTimeMills``)."""
CONSUME_LOCK_WAIT = 1.0
"""Seconds a rebalance waits for an orderly queue's running batch before giving up."""


@dataclass(slots=True)
class PullRequest:
    """A queue to start pulling (``PullRequest``). An orderly consumer re-reads the start
    offset once the queue is locked (``previously_locked`` False until then): the previous
    owner may have committed more before it let the lock go."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False


class SubscribeQueues(Protocol):
    async def find_subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues; raises ``MQClientError`` when no route is known."""
        ...


class RebalanceAPI(Protocol):
    """The broker calls a rebalance makes (``PullAPI`` provides them)."""

    @property
    def routes(self) -> SubscribeQueues: ...

    async def consumer_ids(self, topic: str, group: str) -> list[str]: ...

    async def max_offset(self, mq: MessageQueue) -> int: ...

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...

    async def lock_batch(
        self, broker_name: str, topic: str, group: str, client_id: str, mqs: Collection[MessageQueue]
    ) -> set[MessageQueue]: ...

    async def unlock_batch(
        self,
        broker_name: str,
        topic: str,
        group: str,
        client_id: str,
        mqs: Collection[MessageQueue],
        *,
        oneway: bool,
    ) -> None: ...


class RebalanceListener(Protocol):
    """What the consumer does with a rebalance's outcome."""

    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        """The topic's assignment changed: ``mq_all`` are its queues, ``mq_divided`` ours.
        (Push: new subscription version, per-queue flow limits, a heartbeat. Lite pull:
        the user's ``MessageQueueListener``.)"""
        ...

    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        """Start pulling the newly assigned queues (push: one pull loop each)."""
        ...


@dataclass(frozen=True, kw_only=True)
class RebalanceSettings:
    """What a rebalance knows of its consumer, fixed for its life: who it is, how it shares
    queues and where it starts reading (``consume_timestamp``: yyyyMMddHHmmss, epoch ms, a
    function giving epoch ms, or None for half an hour ago), how it reads offsets and how
    long a dropped orderly queue keeps its broker lock."""

    group: str
    client_id: str
    message_model: MessageModel = MessageModel.CLUSTERING
    allocate_strategy: AllocateStrategy = field(default_factory=AllocateMessageQueueAveragely)
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp: str | int | Callable[[], int] | None = None
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    read_type: ReadOffsetType = ReadOffsetType.READ_FROM_STORE
    unlock_delay: float = UNLOCK_DELAY


class RebalanceImpl:
    """The assigned-queue table of one consumer group in this client, and its rebalance."""

    def __init__(
        self,
        settings: RebalanceSettings,
        api: RebalanceAPI,
        offset_store: OffsetStore,
        subscriptions: dict[str, SubscriptionData],
        *,
        listener: RebalanceListener | None = None,
        clock: Clock = SYSTEM_CLOCK,
        process_queue_factory: Callable[[], ProcessQueue] | None = None,
    ) -> None:
        """``subscriptions`` is the consumer's own dict: a later ``subscribe`` is seen by
        the next round."""
        self.settings = settings
        self.api = api
        self.offset_store = offset_store
        self.subscriptions = subscriptions
        self.listener = listener
        self.clock = clock
        self.consume_lock_wait = CONSUME_LOCK_WAIT
        self.process_queue_factory = process_queue_factory or (lambda: ProcessQueue(clock=clock))
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.topic_subscribe_info: dict[str, frozenset[MessageQueue]] = {}
        self._delayed_unlocks: dict[asyncio.Task[None], MessageQueue] = {}
        self._rebalance_lock = asyncio.Lock()

    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def client_id(self) -> str:
        return self.settings.client_id

    # -- the rebalance -------------------------------------------------------------------
    async def do_rebalance(self, is_order: bool) -> None:
        """One round over every subscribed topic; one topic's failure does not stop the others.
        Rounds never overlap (a timer round and a notified one are serialised)."""
        async with self._rebalance_lock:
            for topic in list(self.subscriptions):
                try:
                    await self.rebalance_by_topic(topic, is_order)
                except Exception:
                    if not is_retry_topic(topic):
                        limited.log(
                            log,
                            logging.WARNING,
                            ("rebalance", self.group, topic),
                            "group %s: rebalance of topic %s failed",
                            self.group,
                            topic,
                            exc_info=True,
                        )
            self.truncate_message_queue_not_my_topic()

    async def topic_queues(self, topic: str) -> frozenset[MessageQueue] | None:
        """The topic's readable queues (``topicSubscribeInfoTable``); None when no route is known."""
        try:
            queues = await self.api.routes.find_subscribe_queues(topic)
        except Exception as exc:
            known = self.topic_subscribe_info.get(topic)
            if known is None and not is_retry_topic(topic):
                # normal while the topic is being created; a typo or a missing topic lasts
                limited.persisting(
                    log,
                    logging.WARNING,
                    ("no-route", self.group, topic),
                    "group %s: no route of subscribed topic %s: %s",
                    self.group,
                    topic,
                    exc,
                )
            return known
        limited.reset(("no-route", self.group, topic))
        found = frozenset(queues)
        self.topic_subscribe_info[topic] = found
        return found

    async def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        mq_set = await self.topic_queues(topic)
        if self.settings.message_model is MessageModel.BROADCASTING:
            if mq_set is None:
                return
            if await self.update_process_queue_table_in_rebalance(topic, mq_set, is_order):
                log.info("group %s: queues of %s changed (broadcasting): %s", self.group, topic, sorted(mq_set))
                await self._changed(topic, mq_set, mq_set)
            return
        try:
            cid_all: list[str] | None = list(await self.api.consumer_ids(topic, self.group))
        except Exception as exc:
            limited.persisting(
                log,
                logging.WARNING,
                ("cids", self.group, topic),
                "group %s topic %s: the consumer id list could not be had: %s",
                self.group,
                topic,
                exc,
            )
            cid_all = None
        if mq_set is None or not cid_all:
            if cid_all is not None and not cid_all:  # until the broker has our first heartbeat
                limited.persisting(
                    log,
                    logging.WARNING,
                    ("cids", self.group, topic),
                    "group %s topic %s: the broker knows no consumer of the group yet",
                    self.group,
                    topic,
                )
            return
        limited.reset(("cids", self.group, topic))
        mq_all = sorted(mq_set, key=message_queue_sort_key)
        cid_all.sort(key=java_string_sort_key)
        strategy = self.settings.allocate_strategy
        try:
            result = strategy.allocate(self.group, self.client_id, mq_all, cid_all)
        except Exception:
            limited.log(
                log,
                logging.ERROR,
                ("allocate", self.group, strategy.name),
                "group %s: allocation by %s failed",
                self.group,
                strategy.name,
                exc_info=True,
            )
            return
        divided = frozenset(result or ())
        if await self.update_process_queue_table_in_rebalance(topic, divided, is_order):
            log.info(
                "group %s topic %s client %s: rebalanced by %s, %d queues / %d consumers -> %d: %s",
                self.group,
                topic,
                self.client_id,
                strategy.name,
                len(mq_set),
                len(cid_all),
                len(divided),
                sorted(divided),
            )
            await self._changed(topic, mq_set, divided)

    async def _changed(self, topic: str, mq_all: frozenset[MessageQueue], divided: frozenset[MessageQueue]) -> None:
        if self.listener is None:
            return
        try:
            await self.listener.message_queue_changed(topic, mq_all, divided)
        except Exception:
            limited.log(
                log,
                logging.ERROR,
                ("queue-listener", self.group, topic),
                "group %s: the listener's message_queue_changed of %s raised",
                self.group,
                topic,
                exc_info=True,
            )

    async def update_process_queue_table_in_rebalance(
        self, topic: str, mq_set: frozenset[MessageQueue], is_order: bool
    ) -> bool:
        """Drop the topic's queues not in ``mq_set`` (or stuck), add the missing ones; True
        when the table changed."""
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq, is_order):
                    self._pop_if(mq, pq)
                    changed = True
                    log.info("group %s: dropped queue %s", self.group, mq)
            elif pq.pull_expired and self.settings.consume_type is ConsumeType.CONSUME_PASSIVELY:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq, is_order):
                    self._pop_if(mq, pq)
                    changed = True
                    log.error("group %s: queue %s was not pulled for too long; re-creating it", self.group, mq)

        requests: list[PullRequest] = []
        for mq in sorted(mq_set):
            if mq in self.process_queue_table:
                continue
            if is_order and not await self.lock(mq):
                log.debug("group %s: queue %s not added, its lock was refused (its old owner holds it)", self.group, mq)
                continue
            self.remove_dirty_offset(mq)
            pq = self.process_queue_factory()
            pq.mark_locked(True)
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except Exception as exc:
                log.info("group %s: the start offset of %s could not be computed: %s", self.group, mq, exc)
                continue
            if next_offset < 0:
                # the offset store said why (rate-limited); the next rebalance tries again
                log.debug("group %s: queue %s not added, no start offset (%d)", self.group, mq, next_offset)
                continue
            if mq in self.process_queue_table:  # added by someone else meanwhile
                continue
            self.process_queue_table[mq] = pq
            log.info("group %s: added queue %s from offset %d", self.group, mq, next_offset)
            requests.append(PullRequest(self.group, mq, pq, next_offset))
            changed = True
        if requests and self.listener is not None:
            try:
                self.listener.dispatch_pull_requests(requests)
            except Exception:
                log.exception("group %s: dispatching %d pull requests failed", self.group, len(requests))
        return changed

    def _pop_if(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if self.process_queue_table.get(mq) is pq:
            del self.process_queue_table[mq]

    def truncate_message_queue_not_my_topic(self) -> None:
        """Drop the queues of topics no longer subscribed."""
        for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscriptions]:
            pq = self.process_queue_table.pop(mq)
            pq.dropped = True
            log.info("group %s: dropped queue %s of a topic no longer subscribed", self.group, mq)

    # -- queue removal -------------------------------------------------------------------
    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue, is_order: bool) -> bool:
        """Persist and forget the queue's offset; orderly clustering consumers also release the
        broker lock, waiting up to a second for a running batch. False keeps the queue in the
        table (a batch is still consuming; the next round tries again)."""
        await self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        if not (is_order and self.settings.message_model is MessageModel.CLUSTERING):
            return True
        try:
            # asyncio.timeout, not wait_for: in 3.11 wait_for keeps a lock granted as a
            # shutdown cancels the rebalance, drops the cancel, and the shutdown hangs
            async with asyncio.timeout(self.consume_lock_wait):
                await pq.consume_lock.acquire()
        except TimeoutError:
            pq.try_unlock_times += 1
            log.debug("group %s: queue %s is consuming, not unlocked (%d tries)", self.group, mq, pq.try_unlock_times)
            return False
        try:
            if pq.has_temp_message():
                self._unlock_later(mq)
            else:
                await self.unlock(mq, oneway=True)
        finally:
            pq.consume_lock.release()
        return True

    def _unlock_later(self, mq: MessageQueue) -> None:
        """Unlock after ``unlock_delay``: the cached messages may still be in a listener."""

        async def later() -> None:
            await asyncio.sleep(self.settings.unlock_delay)
            await self.unlock(mq, oneway=True)

        log.info(
            "group %s: queue %s still has cached messages; unlocking in %.0fs",
            self.group,
            mq,
            self.settings.unlock_delay,
        )
        task = asyncio.get_running_loop().create_task(later())
        self._delayed_unlocks[task] = mq
        task.add_done_callback(lambda t: self._delayed_unlocks.pop(t, None))

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        self.offset_store.remove_offset(mq)

    async def remove_process_queue(self, mq: MessageQueue, is_order: bool = False) -> None:
        """Drop one queue now (e.g. after OFFSET_ILLEGAL); the next rebalance adds it again."""
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            was_dropped = pq.dropped
            pq.dropped = True
            await self.remove_unnecessary_message_queue(mq, pq, is_order)
            log.info("group %s: removed queue %s (was dropped: %s)", self.group, mq, was_dropped)

    # -- start offsets -------------------------------------------------------------------
    def consume_timestamp_ms(self) -> int:
        ts = self.settings.consume_timestamp
        if ts is None:
            return self.clock.wall_ms() - 30 * 60 * 1000
        if callable(ts):
            return ts()
        if isinstance(ts, int):
            return ts
        return parse_consume_timestamp(ts)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The offset to start pulling ``mq`` from; -1 means "not now" (the store could not be
        read). Raises when the broker must be asked for a queue offset and cannot answer."""
        last = await self.offset_store.read_offset(mq, self.settings.read_type)
        if last >= 0:
            return last
        if last != NO_OFFSET:
            return -1
        where = self.settings.consume_from_where
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if is_retry_topic(mq.topic):
                return await self.api.max_offset(mq)
            return await self.api.search_offset(mq, self.consume_timestamp_ms())
        # LAST_OFFSET and the deprecated values that behave like it
        if is_retry_topic(mq.topic):
            return 0
        return await self.api.max_offset(mq)

    # -- broker locks (orderly) ----------------------------------------------------------
    def _by_broker(self, mqs: Collection[MessageQueue]) -> dict[str, set[MessageQueue]]:
        out: dict[str, set[MessageQueue]] = {}
        for mq in mqs:
            out.setdefault(mq.broker_name, set()).add(mq)
        return out

    async def lock(self, mq: MessageQueue) -> bool:
        """Lock one queue on its master; True when this client holds it."""
        try:
            locked = await self.api.lock_batch(mq.broker_name, mq.topic, self.group, self.client_id, [mq])
        except Exception as exc:
            limited.persisting(
                log,
                logging.WARNING,
                ("lock", self.group, mq.broker_name),
                "group %s: locking %s failed: %s",
                self.group,
                mq,
                exc,
                grace=30.0,
            )
            return False
        for q in locked:
            pq = self.process_queue_table.get(q)
            if pq is not None:
                pq.mark_locked(True)
        ok = mq in locked
        log.info("group %s: lock of %s %s", self.group, mq, "OK" if ok else "refused")
        return ok

    async def lock_all(self) -> None:
        """Renew the locks of every assigned queue, one batch per broker group."""
        for broker_name, mqs in self._by_broker(list(self.process_queue_table)).items():
            topic = next(iter(mqs)).topic
            try:
                locked = await self.api.lock_batch(broker_name, topic, self.group, self.client_id, mqs)
            except Exception as exc:
                limited.persisting(
                    log,
                    logging.WARNING,
                    ("lock", self.group, broker_name),
                    "group %s: locking %d queues on %s failed: %s",
                    self.group,
                    len(mqs),
                    broker_name,
                    exc,
                    grace=30.0,
                )
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    if not pq.locked:
                        log.info("group %s: locked %s", self.group, mq)
                    pq.mark_locked(True)
                else:
                    if pq.locked:
                        log.info("group %s: lost the lock of %s", self.group, mq)
                    pq.mark_locked(False)

    async def unlock(self, mq: MessageQueue, *, oneway: bool) -> None:
        try:
            await self.api.unlock_batch(mq.broker_name, mq.topic, self.group, self.client_id, [mq], oneway=oneway)
            log.info("group %s: unlocked %s", self.group, mq)
        except Exception as exc:
            log.info("group %s: unlocking %s failed (the broker lets the lock expire): %s", self.group, mq, exc)

    async def unlock_all(self, *, oneway: bool) -> None:
        for broker_name, mqs in self._by_broker(list(self.process_queue_table)).items():
            topic = next(iter(mqs)).topic
            try:
                await self.api.unlock_batch(broker_name, topic, self.group, self.client_id, mqs, oneway=oneway)
            except Exception as exc:
                log.info(
                    "group %s: unlocking %d queues on %s failed (the broker lets the locks expire): %s",
                    self.group,
                    len(mqs),
                    broker_name,
                    exc,
                )
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.mark_locked(False)

    # -- teardown ------------------------------------------------------------------------
    def destroy(self) -> None:
        """Mark every queue dropped and empty the table (consumer shutdown)."""
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()

    async def close(self) -> None:
        """``destroy``, and release at once the locks whose delayed unlock is pending."""
        self.destroy()
        pending = dict(self._delayed_unlocks)
        for task in pending:
            task.cancel()
        for task, mq in pending.items():
            try:
                await task
            except asyncio.CancelledError:
                pass
            await self.unlock(mq, oneway=True)

    def assigned(self, topic: str | None = None) -> Mapping[MessageQueue, ProcessQueue]:
        """The assigned queues (of one topic, or all)."""
        if topic is None:
            return dict(self.process_queue_table)
        return {mq: pq for mq, pq in self.process_queue_table.items() if mq.topic == topic}
