"""The lite pull consumer (RocketMQ 4.9.7 ``DefaultLitePullConsumer``): the application
calls ``poll`` and gets what background readers have already pulled.

This module is the facade the application uses: the lifecycle, and what the client
instance and the rebalance call. It holds no setting of its own: ``LitePullSettings``
(``lite_pull.settings``) holds them, frozen and checked; ``LitePullState``
(``lite_pull.state``) what its parts share. The work is done by its parts: what to read
(``subscribe`` or ``assign``, never both) is ``lite_pull.plan``'s; the per-queue readers
filling the buffer are ``lite_pull.readers``'; ``poll``, ``seek`` and the commits, which
move and record each queue's consume offset, are ``lite_pull.progress``'; the topic
queue-change listeners are ``lite_pull.metadata``'s.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any

from ledgermq.client.consumer.client_check import check_client_in_broker
from ledgermq.client.consumer.common import (
    DEFAULT_CONSUMER_GROUP,
    SUB_ALL,
    ConsumeType,
    MessageModel,
    MessageSelector,
    selector_of,
)
from ledgermq.client.consumer.offset_store import OffsetStore, ReadOffsetType
from ledgermq.client.consumer.parts import (
    BackgroundTasks,
    ConsumerParts,
    load_offset_store,
    rebalance_for,
    with_client_ip,
)
from ledgermq.client.consumer.rebalance import PullRequest, RebalanceImpl
from ledgermq.client.consumer.settings import settings_of
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.client.lite_pull.assigned_queues import AssignedQueues, ConsumeBuffer
from ledgermq.client.lite_pull.metadata import TopicMessageQueueChangeListener, TopicQueueWatcher
from ledgermq.client.lite_pull.plan import MessageQueueListener, ReadMode, ReadPlan
from ledgermq.client.lite_pull.progress import ConsumeProgress
from ledgermq.client.lite_pull.readers import QueueReaders
from ledgermq.client.lite_pull.settings import LitePullSettings, heartbeat_data, running_info
from ledgermq.client.lite_pull.state import LitePullState
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "LitePullConsumer",
    "LitePullSettings",
    "MessageQueueListener",
    "TopicMessageQueueChangeListener",
]

log = logging.getLogger(__name__)


class LitePullConsumer:
    """``async with LitePullConsumer("cg", "127.0.0.1:9876") as c: c.subscribe("T"); await c.poll()``.

    Offsets are queue offsets (message counts), as everywhere in RocketMQ. ``poll``'s timeout
    is in seconds; the ``*_millis`` options are milliseconds as in Java; intervals are seconds.
    """

    def __init__(
        self,
        group: str | None = None,
        namesrv_addrs: str | Sequence[str] | None = None,
        *,
        settings: LitePullSettings | None = None,
        offset_store: OffsetStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        **options: Any,
    ) -> None:
        """``LitePullConsumer("cg", "127.0.0.1:9876", pull_batch_size=32)`` or
        ``LitePullConsumer(settings=LitePullSettings(...))``: the keyword arguments are
        ``LitePullSettings``' fields, checked when given. ``offset_store`` replaces the store
        the message model calls for; ``rng`` is the client instance's random source."""
        self.settings = with_client_ip(settings_of(LitePullSettings, settings, group, namesrv_addrs, options))
        self.clock = clock
        self._rng = rng
        self._given_offset_store = offset_store
        self._shared = LitePullState(self.settings, clock)
        self._assigned = AssignedQueues()
        self._buffer = ConsumeBuffer()
        self._plan = ReadPlan(self._assigned, clock)
        self._background = BackgroundTasks(self.settings.group, log, name_prefix="lite-pull")
        self._readers = QueueReaders(self._shared, self._plan, self._buffer, self._background)
        self._progress = ConsumeProgress(self._shared, self._plan, self._buffer, self._readers)
        self._metadata = TopicQueueWatcher(self._shared, self._background)

    # -- the settings the application reads --------------------------------------------
    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def message_model(self) -> MessageModel:
        return self.settings.message_model

    # -- parts that exist once started ---------------------------------------------------
    @property
    def instance(self) -> ClientInstance:
        return self._shared.started.instance

    @property
    def offset_store(self) -> OffsetStore:
        return self._shared.started.offset_store

    @property
    def rebalance(self) -> RebalanceImpl:
        return self._shared.started.rebalance

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def running(self) -> bool:
        return self._shared.running

    def _check_running(self) -> None:
        if self._shared.lifecycle != "running":
            raise ClientStateError(f"the consumer is {self._shared.lifecycle}, not running; start it first")

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Join the client instance, start the readers of assigned queues (subscribe mode:
        announce the group and rebalance at once)."""
        if self._shared.lifecycle != "created":
            raise ClientStateError(f"the consumer is {self._shared.lifecycle}; it can be started once")
        self._shared.lifecycle = "starting"
        settings = self.settings
        instance = ClientInstance.acquire(
            settings.namesrv_addrs,
            **settings.instance_options(),
            persist_interval=settings.persist_interval,
            clock=self.clock,
            rng=self._rng,
        )
        try:
            store = await load_offset_store(
                settings, instance, self._given_offset_store, settings.local_offset_store_dir
            )
            instance.register_consumer(self)
        except BaseException:
            self._shared.lifecycle = "start failed"
            await instance.release()
            raise
        rebalance = rebalance_for(
            settings,
            instance,
            store,
            self,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            read_type=ReadOffsetType.MEMORY_FIRST_THEN_STORE,
            subscriptions=self._plan.subscriptions,
            clock=self.clock,
        )
        self._shared.parts = ConsumerParts(instance, store, rebalance)
        self._assigned.process_queue_of = rebalance.process_queue_table.get
        self._shared.start_ms = self.clock.wall_ms()
        try:
            await instance.start()
        except BaseException:
            self._shared.lifecycle = "start failed"
            await instance.unregister_consumer(self.group)
            await instance.release()
            raise
        self._shared.lifecycle = "running"
        mode = self._plan.mode.value
        log.info("lite pull consumer %s started (client %s, %s)", self.group, instance.client_id, mode)
        if self._plan.mode is ReadMode.ASSIGN:
            self._readers.start(self._assigned.states())
        self._metadata.start()
        if self._plan.subscribing:
            topics = list(self._plan.subscriptions)
            await self._fetch_routes(topics)
            try:
                await check_client_in_broker(instance, self.group, list(self._plan.subscriptions.values()))
            except BaseException:
                await self.shutdown()
                self._shared.lifecycle = "start failed"
                raise
            await self._announce_subscriptions(topics, routes_fetched=True)
        else:
            await instance.heartbeat()

    async def shutdown(self) -> None:
        """Stop the readers, commit (when auto-committing) and persist the offsets, leave
        the group and release the client instance. ``poll`` calls waiting return []."""
        if self._shared.lifecycle in ("created", "start failed"):
            self._shared.lifecycle = "shut down"
            return
        if self._shared.lifecycle != "running":
            return
        self._shared.lifecycle = "shutting down"
        self._buffer.ready.set()  # wake pollers; they see the state and return []
        metadata = self._metadata.stop()
        tasks = [t for t in [metadata, *self._background.cancel(), *self._readers.cancel()] if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        instance = self.instance
        try:
            if self.settings.auto_commit:
                self.commit_sync()
            await self._progress.flush()
            await self.rebalance.close()
            await instance.unregister_consumer(self.group)
        finally:
            self._buffer.clear()
            self._shared.lifecycle = "shut down"
            await instance.release()
        log.info("lite pull consumer %s shut down", self.group)

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    # -- what to read --------------------------------------------------------------------
    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = SUB_ALL,
        listener: MessageQueueListener | None = None,
        *,
        expression_type: str = "TAG",
    ) -> None:
        """Read ``topic`` (messages whose tag matches ``expression``: ``"*"`` or
        ``"TagA || TagB"``; or, with ``expression_type="SQL92"`` or a
        ``MessageSelector.by_sql(...)``, whose properties satisfy a SQL92 expression, checked
        here and evaluated by the broker) as a member of the group.
        ``listener(topic, mq_all, mq_divided)`` is told after every rebalance that changed
        this consumer's queues."""
        if not topic or not topic.strip():
            raise ValueError("the topic can not be blank")
        if self._shared.lifecycle not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._shared.lifecycle}")
        text, kind = selector_of(expression, expression_type)
        self._plan.subscribe(topic, text, listener, expression_type=kind)
        if self._shared.lifecycle == "running":
            self.instance.routes.watch(topic)
            self._background.spawn(partial(self._announce_subscriptions, [topic]), f"subscribe to {topic}")

    async def _announce_subscriptions(self, topics: list[str], *, routes_fetched: bool = False) -> None:
        """Fetch the topics' routes, tell the brokers (heartbeat) and rebalance now."""
        if not routes_fetched:
            await self._fetch_routes(topics)
        await self.instance.heartbeat()
        self.instance.rebalance_now()

    async def _fetch_routes(self, topics: list[str]) -> None:
        instance = self.instance
        for topic in topics:
            try:
                await instance.routes.update(topic)
            except MQClientError as exc:
                # a topic not created yet: the rebalance warns if that lasts
                log.debug("group %s: route of %s could not be fetched: %s", self.group, topic, exc)

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic``: its readers stop and its buffered messages are dropped."""
        for state in self._plan.unsubscribe(topic):
            self._readers.drop(state)
        if self._shared.lifecycle == "running" and self._plan.subscribing:
            self._background.spawn(partial(self._announce_subscriptions, []), f"unsubscribe from {topic}")

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Read exactly these queues (replacing an earlier assignment), without group
        coordination. Readers start from the group's committed offsets (else as
        ``consume_from_where`` says), or where ``seek`` puts them."""
        queues = set(mqs)
        if not queues:
            raise ValueError("the message queues can not be empty")
        if self._shared.lifecycle not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._shared.lifecycle}")
        removed, added = self._plan.assign(queues)
        for state in removed:
            self._readers.drop(state)
            if self._shared.lifecycle == "running":
                self._background.spawn(partial(self._progress.forget, state.mq), f"offset of {state.mq}")
        if self._shared.lifecycle == "running":
            for topic in {mq.topic for mq in queues}:
                self.instance.routes.watch(topic)
            self._readers.start(added)

    def set_sub_expression_for_assign(self, topic: str, expression: str) -> None:
        """The tag expression readers of ``topic``'s assigned queues use (default ``"*"``);
        only before ``start``, as in Java."""
        if not expression or not expression.strip():
            raise ValueError("the sub expression can not be blank")
        if self._shared.lifecycle != "created":
            raise ClientStateError("set_sub_expression_for_assign can only be called before start")
        self._plan.set_assign_expression(topic, expression)

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer reads now (assigned, or given by the last rebalance)."""
        return self._assigned.queues()

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues (already buffered messages are still polled)."""
        self._assigned.pause(mqs)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        self._assigned.resume(mqs)

    # -- rebalance listener (subscribe mode) ---------------------------------------------
    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        """Only noted: readers start when ``message_queue_changed`` assigns the queues."""
        self._plan.record_start_offsets(requests)

    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        if self._shared.lifecycle != "running" or topic not in self._plan.subscriptions:
            return
        mine = mq_all if self.message_model is MessageModel.BROADCASTING else mq_divided
        self._readers.replace(*self._plan.rebalanced(topic, mine))
        await self._plan.tell_listener(self.group, topic, mq_all, mq_divided)

    # -- poll ----------------------------------------------------------------------------
    async def poll(self, timeout: float | None = None) -> list[MessageRecord]:
        """Up to ``consume_message_batch_max_size`` pulled messages; waits up to ``timeout``
        seconds (default ``poll_timeout_millis``) for the first, [] when none came."""
        self._check_running()
        return await self._progress.poll(timeout)

    # -- positions -----------------------------------------------------------------------
    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next (also its consume offset now); what was buffered
        for it is discarded. ``offset`` must lie in [min offset, max offset] of the queue."""
        self._check_running()
        await self._progress.seek(mq, offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Seek to the queue's min offset (the oldest message kept)."""
        self._check_running()
        await self.seek(mq, await self.instance.pull_api.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Seek to the queue's max offset (only messages stored from now on)."""
        self._check_running()
        await self.seek(mq, await self.instance.pull_api.max_offset(mq))

    async def fetch_message_queues(self, topic: str) -> set[MessageQueue]:
        """The topic's readable queues (from the name servers)."""
        self._check_running()
        return set(await self.instance.routes.find_subscribe_queues(topic))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message of ``mq`` stored at or after ``timestamp_ms``."""
        self._check_running()
        return await self.instance.pull_api.search_offset(mq, timestamp_ms)

    # -- offsets -------------------------------------------------------------------------
    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq``: this consumer's latest commit, else the
        broker's (the file's when broadcasting); -1 when there is none."""
        self._check_running()
        return await self._progress.committed(mq)

    def commit_sync(self) -> None:
        """Commit the consume offset of every assigned queue (Java ``commitSync()``): into
        the offset store now, to the brokers with the next persist (every ``persist_interval``
        and at shutdown)."""
        if self._shared.parts is not None:
            self._progress.commit_sync()

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None, persist: bool = True) -> None:
        """Commit ``offsets`` (queue -> the next offset to read; default: every assigned
        queue's consume offset) and, with ``persist``, write them to the brokers (the local
        file when broadcasting) now, raising the first failure.

        A queue this consumer does not read is committed only in assign mode and with
        ``persist`` (straight to the broker); in subscribe mode another member may own it,
        so it is skipped with a warning (Java skips it silently).
        """
        self._check_running()
        await self._progress.commit(offsets, persist)

    # -- topic metadata ------------------------------------------------------------------
    def register_topic_message_queue_change_listener(
        self, topic: str, listener: TopicMessageQueueChangeListener
    ) -> None:
        """Call ``listener(topic, queues)`` (a plain or async function) whenever the topic's
        queues change; checked every ``topic_metadata_check_interval`` (first after 10 s)."""
        self._metadata.register(topic, listener)

    # -- what the client instance calls --------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        return heartbeat_data(self.settings, self._plan.announced())

    def subscribed_topics(self) -> set[str]:
        return self._plan.topics()

    async def do_rebalance(self) -> None:
        if self._plan.subscribing and self._shared.lifecycle == "running":
            await self.rebalance.do_rebalance(False)

    async def persist_offsets(self) -> None:
        """Persist the stored offsets of the queues read now (Java ``persistConsumerOffset``)."""
        if self._shared.parts is not None:
            await self._progress.persist(self._shared.parts.rebalance)

    def running_info(self) -> dict[str, Any]:
        """``ConsumerRunningInfo``: the settings as Java names them and the subscriptions."""
        return running_info(self.settings, self._shared.start_ms, self._plan.announced())
