"""The lite pull consumer (RocketMQ 4.9.7 ``DefaultLitePullConsumer``): the application
calls ``poll`` and gets what background readers have already pulled.

This module is the facade the application uses: the settings, the lifecycle, and what the
client instance and the rebalance call. The work is done by its parts: what to read
(``subscribe`` or ``assign``, never both) is ``lite_pull_plan``'s; the per-queue readers
filling the buffer are ``lite_pull_readers``'; ``poll``, ``seek`` and the commits, which
move and record each queue's consume offset, are ``lite_pull_progress``'; the topic
queue-change listeners are ``lite_pull_metadata``'s; checking and reporting the settings
is ``lite_pull_settings``'.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any

from ledgermq.acl.signing import Credentials
from ledgermq.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from ledgermq.client.consumer.common import DEFAULT_CONSUMER_GROUP as DEFAULT_CONSUMER_GROUP
from ledgermq.client.consumer.common import (
    PULL_DELAY_WHEN_BROKER_FLOW_CONTROL as PULL_DELAY_WHEN_BROKER_FLOW_CONTROL,
)
from ledgermq.client.consumer.common import (
    SUB_ALL,
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageSelector,
    selector_of,
)
from ledgermq.client.consumer.offset_store import OffsetStore, ReadOffsetType
from ledgermq.client.consumer.parts import BackgroundTasks, load_offset_store, rebalance_for
from ledgermq.client.consumer.rebalance import PullRequest, RebalanceImpl
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.instance.client_check import check_client_in_broker
from ledgermq.client.instance.client_instance import ClientInstance, local_ip
from ledgermq.client.lite_pull.assigned_queues import AssignedQueues, ConsumeBuffer
from ledgermq.client.lite_pull.metadata import TOPIC_METADATA_FIRST_CHECK as TOPIC_METADATA_FIRST_CHECK
from ledgermq.client.lite_pull.metadata import TopicMessageQueueChangeListener, TopicQueueWatcher
from ledgermq.client.lite_pull.plan import MessageQueueListener, ReadMode, ReadPlan
from ledgermq.client.lite_pull.progress import ConsumeProgress
from ledgermq.client.lite_pull.readers import FLOW_CONTROL_LOG_EVERY as FLOW_CONTROL_LOG_EVERY
from ledgermq.client.lite_pull.readers import PULL_DELAY_ON_OFFSET_EXCEPTION as PULL_DELAY_ON_OFFSET_EXCEPTION
from ledgermq.client.lite_pull.readers import PULL_DELAY_WHEN_CACHE_FLOW_CONTROL as PULL_DELAY_WHEN_CACHE_FLOW_CONTROL
from ledgermq.client.lite_pull.readers import PULL_DELAY_WHEN_PAUSE as PULL_DELAY_WHEN_PAUSE
from ledgermq.client.lite_pull.readers import ROUTE_REFRESH_MIN_INTERVAL as ROUTE_REFRESH_MIN_INTERVAL
from ledgermq.client.lite_pull.readers import QueueReaders
from ledgermq.client.lite_pull.settings import GROUP_MAX_LENGTH as GROUP_MAX_LENGTH
from ledgermq.client.lite_pull.settings import MIN_AUTO_COMMIT_INTERVAL as MIN_AUTO_COMMIT_INTERVAL
from ledgermq.client.lite_pull.settings import check_group as check_group
from ledgermq.client.lite_pull.settings import check_settings, heartbeat_data, running_info
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord

# Also re-exported (imported "as" themselves above): the constants and check_group, which
# were defined here before the parts moved out.
__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "LitePullConsumer",
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
        group: str,
        namesrv_addrs: str | Sequence[str],
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | int | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        pull_batch_size: int = 10,
        pull_threads_nums: int = 20,
        consume_message_batch_max_size: int = 10,
        pull_threshold_for_all: int = 10_000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_max_span: int = 2000,
        poll_timeout_millis: int = 5000,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        topic_metadata_check_interval: float = 30.0,
        broker_suspend_max_time_millis: int = 20_000,
        consumer_timeout_millis_when_suspend: int = 30_000,
        pull_time_delay_millis_when_exception: int = 1000,
        offset_store: OffsetStore | None = None,
        local_offset_store_dir: str | None = None,
        unit_mode: bool = False,
        instance_name: str = "DEFAULT",
        client_ip: str | None = None,
        api_timeout: float = 3.0,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        rebalance_interval: float = 20.0,
        persist_interval: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        check_group(group)
        check_settings(
            pull_batch_size=pull_batch_size,
            pull_threads_nums=pull_threads_nums,
            consume_message_batch_max_size=consume_message_batch_max_size,
            auto_commit_interval=auto_commit_interval,
            poll_timeout_millis=poll_timeout_millis,
            broker_suspend_max_time_millis=broker_suspend_max_time_millis,
            consumer_timeout_millis_when_suspend=consumer_timeout_millis_when_suspend,
        )
        self.group = group
        self.namesrv_addrs = namesrv_addrs
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.allocate_strategy: AllocateStrategy = allocate_strategy or AllocateMessageQueueAveragely()
        self.pull_batch_size = pull_batch_size
        self.pull_threads_nums = pull_threads_nums
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_all = pull_threshold_for_all
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_max_span = consume_max_span
        self.poll_timeout_millis = poll_timeout_millis
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.topic_metadata_check_interval = topic_metadata_check_interval
        self.broker_suspend_max_time_millis = broker_suspend_max_time_millis
        self.consumer_timeout_millis_when_suspend = consumer_timeout_millis_when_suspend
        self.pull_time_delay_when_exception = pull_time_delay_millis_when_exception / 1000
        self.unit_mode = unit_mode
        self.instance_name = instance_name
        self.client_ip = client_ip or local_ip()
        self.clock = clock
        self._instance_options: dict[str, Any] = dict(
            api_timeout=api_timeout,
            poll_namesrv_interval=poll_namesrv_interval,
            heartbeat_interval=heartbeat_interval,
            rebalance_interval=rebalance_interval,
            persist_interval=persist_interval,
            clock=clock,
            rng=rng,
            credentials=credentials,
        )
        self._user_offset_store = offset_store
        self._local_offset_store_dir = local_offset_store_dir
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._rebalance: RebalanceImpl | None = None
        self._state = "created"
        self._start_timestamp = 0
        self._assigned = AssignedQueues()
        self._buffer = ConsumeBuffer()
        self._plan = ReadPlan(self._assigned)
        self._background = BackgroundTasks(group, log, name_prefix="lite-pull")
        self._readers = QueueReaders(self, self._plan, self._buffer, self._background)
        self._progress = ConsumeProgress(self, self._plan, self._buffer, self._readers)
        self._metadata = TopicQueueWatcher(self, self._background)

    # -- parts that exist once started ---------------------------------------------------
    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError(f"the consumer is {self._state}; start it first")
        return self._instance

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise ClientStateError(f"the consumer is {self._state}; start it first")
        return self._offset_store

    @property
    def rebalance(self) -> RebalanceImpl:
        if self._rebalance is None:
            raise ClientStateError(f"the consumer is {self._state}; start it first")
        return self._rebalance

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def running(self) -> bool:
        return self._state == "running"

    def _check_running(self) -> None:
        if self._state != "running":
            raise ClientStateError(f"the consumer is {self._state}, not running; start it first")

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Join the client instance, start the readers of assigned queues (subscribe mode:
        announce the group and rebalance at once)."""
        if self._state != "created":
            raise ClientStateError(f"the consumer is {self._state}; it can be started once")
        self._state = "starting"
        instance = ClientInstance.acquire(
            self.namesrv_addrs, client_ip=self.client_ip, instance_name=self.instance_name, **self._instance_options
        )
        try:
            store = await load_offset_store(self, instance, self._user_offset_store, self._local_offset_store_dir)
            instance.register_consumer(self)
        except BaseException:
            self._state = "start failed"
            await instance.release()
            raise
        self._instance = instance
        self._offset_store = store
        self._rebalance = rebalance_for(
            self,
            instance,
            store,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            read_type=ReadOffsetType.MEMORY_FIRST_THEN_STORE,
            subscriptions=self._plan.subscriptions,
        )
        self._assigned.process_queue_of = self._rebalance.process_queue_table.get
        self._start_timestamp = self.clock.wall_ms()
        try:
            await instance.start()
        except BaseException:
            self._state = "start failed"
            await instance.unregister_consumer(self.group)
            await instance.release()
            raise
        self._state = "running"
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
                self._state = "start failed"
                raise
            await self._announce_subscriptions(topics, routes_fetched=True)
        else:
            await instance.heartbeat()

    async def shutdown(self) -> None:
        """Stop the readers, commit (when auto-committing) and persist the offsets, leave
        the group and release the client instance. ``poll`` calls waiting return []."""
        if self._state in ("created", "start failed"):
            self._state = "shut down"
            return
        if self._state != "running":
            return
        self._state = "shutting down"
        self._buffer.ready.set()  # wake pollers; they see the state and return []
        metadata = self._metadata.stop()
        tasks = [t for t in [metadata, *self._background.cancel(), *self._readers.cancel()] if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        instance = self.instance
        try:
            if self.auto_commit:
                self.commit_sync()
            await self._progress.flush()
            if self._rebalance is not None:
                await self._rebalance.close()
            await instance.unregister_consumer(self.group)
        finally:
            self._buffer.clear()
            self._state = "shut down"
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
        if self._state not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._state}")
        text, kind = selector_of(expression, expression_type)
        self._plan.subscribe(topic, text, listener, expression_type=kind)
        if self._state == "running":
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
        if self._state == "running" and self._plan.subscribing:
            self._background.spawn(partial(self._announce_subscriptions, []), f"unsubscribe from {topic}")

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Read exactly these queues (replacing an earlier assignment), without group
        coordination. Readers start from the group's committed offsets (else as
        ``consume_from_where`` says), or where ``seek`` puts them."""
        queues = set(mqs)
        if not queues:
            raise ValueError("the message queues can not be empty")
        if self._state not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._state}")
        removed, added = self._plan.assign(queues)
        for state in removed:
            self._readers.drop(state)
            if self._state == "running":
                self._background.spawn(partial(self._progress.forget, state.mq), f"offset of {state.mq}")
        if self._state == "running":
            for topic in {mq.topic for mq in queues}:
                self.instance.routes.watch(topic)
            self._readers.start(added)

    def set_sub_expression_for_assign(self, topic: str, expression: str) -> None:
        """The tag expression readers of ``topic``'s assigned queues use (default ``"*"``);
        only before ``start``, as in Java."""
        if not expression or not expression.strip():
            raise ValueError("the sub expression can not be blank")
        if self._state != "created":
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
        if self._state != "running" or topic not in self._plan.subscriptions:
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
        if self._offset_store is not None:
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
        return heartbeat_data(self, self._plan.announced())

    def subscribed_topics(self) -> set[str]:
        return self._plan.topics()

    async def do_rebalance(self) -> None:
        if self._plan.subscribing and self._state == "running":
            await self.rebalance.do_rebalance(False)

    async def persist_offsets(self) -> None:
        """Persist the stored offsets of the queues read now (Java ``persistConsumerOffset``)."""
        if self._offset_store is not None:
            await self._progress.persist(self._rebalance)

    def running_info(self) -> dict[str, Any]:
        """``ConsumerRunningInfo``: the settings as Java names them and the subscriptions."""
        return running_info(self, self._start_timestamp, self._plan.announced())
