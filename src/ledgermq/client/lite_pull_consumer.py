"""The lite pull consumer (RocketMQ 4.9.7 ``DefaultLitePullConsumer``): the application
calls ``poll`` and gets what background readers have already pulled.

Two ways to say what to read, exclusive as in Java:

* ``subscribe(topic, expression)``: the group shares the topic's queues among its members
  (CLUSTERING, through the client instance's rebalance) or every member reads them all
  (BROADCASTING);
* ``assign(queues)``: exactly these queues, no group coordination. The group still names
  the committed offsets the readers start from.

Every assigned queue has a reader task that pulls ``pull_batch_size`` messages at a time
(long polling: the broker holds a pull up to ``broker_suspend_max_time_millis`` when the
queue has nothing new) and appends each batch to one buffer; ``poll`` hands out up to
``consume_message_batch_max_size`` buffered messages, oldest batch first, or waits up to
its timeout for some. Readers back off as Java's do: 50 ms while the buffer or their
queue is over a flow-control threshold, 20 ms after a broker FLOW_CONTROL answer,
``pull_time_delay_millis_when_exception`` (1 s) after a failed pull, 3 s when the start
offset cannot be computed; a paused queue's reader waits until ``resume``. At most
``pull_threads_nums`` pulls transfer messages at once; a queue whose last pull found
nothing new long-polls outside that limit, so idle queues never hold back busy ones
(Java's pull threads block in those long polls).

Offsets: ``poll`` moves each queue's *consume offset* (the offset after the last message
returned, what a commit records). ``commit_sync`` puts the consume offsets into the
offset store's memory; the client instance persists that to the brokers every
``persist_interval`` (5 s) and at shutdown. ``await commit(...)`` also writes at once and
waits for the brokers' answers. With ``auto_commit`` each ``poll`` first commits (as
``commit_sync``) when ``auto_commit_interval`` has passed since the last time: by then the
application has processed what the previous polls returned. Shutdown commits once more
when auto-committing. Offsets of a broadcasting consumer live in a local file instead.

``seek`` repositions a queue (validated against the queue's min and max offsets) and
discards what was buffered for it. Pulls go to the master, or to a slave while the master
is away from the route (``PullAPI``); after a connection failure the reader refreshes the
topic's route (at most once a second per topic), so a dead master is left within about a
second rather than at the next 30 s route refresh.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any

from ledgermq.client.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from ledgermq.client.assigned_queues import AssignedQueues, ConsumeBuffer, QueueState
from ledgermq.client.consumer_common import (
    SUB_ALL,
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
    consumer_data,
)
from ledgermq.client.errors import ClientStateError, MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance import ClientInstance, local_ip
from ledgermq.client.offset_store import (
    OFFSET_UNREADABLE,
    OffsetStore,
    ReadOffsetType,
    RemoteOffsetStore,
    offset_store_for,
)
from ledgermq.client.process_queue import ProcessQueue
from ledgermq.client.pull_api import PullResult, PullStatus
from ledgermq.client.rebalance import PullRequest, RebalanceImpl
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.message import MessageRecord

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "LitePullConsumer",
    "MessageQueueListener",
    "TopicMessageQueueChangeListener",
]

log = logging.getLogger(__name__)

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
GROUP_MAX_LENGTH = 255
_VALID_GROUP = re.compile(r"[%|a-zA-Z0-9_-]+")

PULL_DELAY_WHEN_CACHE_FLOW_CONTROL = 0.05
PULL_DELAY_WHEN_BROKER_FLOW_CONTROL = 0.02
PULL_DELAY_WHEN_PAUSE = 1.0
PULL_DELAY_ON_OFFSET_EXCEPTION = 3.0
MIN_AUTO_COMMIT_INTERVAL = 1.0
TOPIC_METADATA_FIRST_CHECK = 10.0
ROUTE_REFRESH_MIN_INTERVAL = 1.0
FLOW_CONTROL_LOG_EVERY = 1000

TopicMessageQueueChangeListener = Callable[[str, set[MessageQueue]], Awaitable[None] | None]
"""``fn(topic, queues)``: the topic's queues changed (checked every ``topic_metadata_check_interval``)."""
MessageQueueListener = Callable[[str, set[MessageQueue], set[MessageQueue]], Awaitable[None] | None]
"""``fn(topic, mq_all, mq_divided)``: a rebalance changed this consumer's queues of ``topic``."""


class _Mode(enum.Enum):
    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


def check_group(group: str) -> None:
    """``Validators.checkGroup`` plus the DEFAULT_CONSUMER refusal of ``checkConfig``."""
    if not group or not group.strip():
        raise MQClientError("the consumer group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the consumer group is longer than {GROUP_MAX_LENGTH} characters")
    if not _VALID_GROUP.fullmatch(group):
        raise MQClientError(f"the consumer group {group!r} has illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")
    if group == DEFAULT_CONSUMER_GROUP:
        raise MQClientError(f"the consumer group can not be {DEFAULT_CONSUMER_GROUP}; name another one")


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
    ) -> None:
        check_group(group)
        for name, value in (
            ("pull_batch_size", pull_batch_size),
            ("pull_threads_nums", pull_threads_nums),
            ("consume_message_batch_max_size", consume_message_batch_max_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if auto_commit_interval < MIN_AUTO_COMMIT_INTERVAL:
            raise ValueError(f"auto_commit_interval must be at least {MIN_AUTO_COMMIT_INTERVAL:.0f} s")
        if poll_timeout_millis < 0:
            raise ValueError("poll_timeout_millis must not be negative")
        if consumer_timeout_millis_when_suspend < broker_suspend_max_time_millis:
            raise MQClientError(
                "long polling: consumer_timeout_millis_when_suspend must be at least broker_suspend_max_time_millis"
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
        )
        self._user_offset_store = offset_store
        self._local_offset_store_dir = local_offset_store_dir
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._rebalance: RebalanceImpl | None = None
        self._state = "created"
        self._mode = _Mode.NONE
        self._start_timestamp = 0
        # subscribe mode: topic -> subscription (the rebalance works on this same dict)
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._queue_listener: MessageQueueListener | None = None
        # assign mode: topic -> tag expression (setSubExpressionForAssign)
        self._assign_expressions: dict[str, str] = {}
        self._assign_subscriptions: dict[str, SubscriptionData] = {}
        self._assigned = AssignedQueues()
        self._buffer = ConsumeBuffer()
        self._tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._aux_tasks: set[asyncio.Task[Any]] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._permits = asyncio.Semaphore(pull_threads_nums)
        self._start_offsets: dict[MessageQueue, tuple[ProcessQueue, int]] = {}
        self._topic_listeners: dict[str, TopicMessageQueueChangeListener] = {}
        self._topic_queues: dict[str, set[MessageQueue]] = {}
        self._route_refreshed: dict[str, float] = {}
        self._next_auto_commit = float("-inf")
        self._flow_control_times = {"all": 0, "queue": 0, "span": 0}

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
            store = self._user_offset_store or offset_store_for(
                broadcasting=self.message_model is MessageModel.BROADCASTING,
                broker=instance.pull_api,
                group=self.group,
                client_ip=instance.client_ip,
                client_id=instance.client_id,
                instance_name=self.instance_name,
                store_dir=self._local_offset_store_dir,
            )
            await store.load()
            instance.register_consumer(self)
        except BaseException:
            self._state = "start failed"
            await instance.release()
            raise
        self._instance = instance
        self._offset_store = store
        self._rebalance = RebalanceImpl(
            self.group,
            instance.client_id,
            instance.pull_api,
            store,
            listener=self,
            message_model=self.message_model,
            allocate_strategy=self.allocate_strategy,
            consume_from_where=self.consume_from_where,
            consume_timestamp=self.consume_timestamp,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            read_type=ReadOffsetType.MEMORY_FIRST_THEN_STORE,
            subscriptions=self._subscriptions,
            clock=self.clock,
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
        log.info("lite pull consumer %s started (client %s, %s)", self.group, instance.client_id, self._mode.value)
        if self._mode is _Mode.ASSIGN:
            self._start_readers(self._assigned.states())
        for topic in list(self._topic_listeners):
            self._spawn(partial(self._baseline_queues, topic), f"queues of {topic}")
        self._metadata_task = asyncio.create_task(self._metadata_loop(), name=f"lite-pull-metadata {self.group}")
        if self._mode is _Mode.SUBSCRIBE:
            await self._announce_subscriptions(list(self._subscriptions))
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
        tasks = [t for t in [self._metadata_task, *self._aux_tasks, *self._tasks.values()] if t is not None]
        self._metadata_task = None
        self._tasks.clear()
        self._aux_tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        instance = self.instance
        try:
            if self.auto_commit:
                self.commit_sync()
            await self._flush_offsets()
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

    def _spawn(self, make: Callable[[], Awaitable[Any]], what: str) -> None:
        """Run ``make()`` in the background; a failure is logged."""

        async def guarded() -> None:
            try:
                await make()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group %s: %s failed", self.group, what)

        task = asyncio.get_running_loop().create_task(guarded(), name=f"lite-pull {what}")
        self._aux_tasks.add(task)
        task.add_done_callback(self._aux_tasks.discard)

    # -- what to read --------------------------------------------------------------------
    def _set_mode(self, mode: _Mode) -> None:
        if self._mode is _Mode.NONE:
            self._mode = mode
        elif self._mode is not mode:
            raise MQClientError("subscribe and assign are mutually exclusive")

    def subscribe(self, topic: str, expression: str = SUB_ALL, listener: MessageQueueListener | None = None) -> None:
        """Read ``topic`` (messages whose tag matches ``expression``: ``"*"`` or
        ``"TagA || TagB"``) as a member of the group. ``listener(topic, mq_all, mq_divided)``
        is told after every rebalance that changed this consumer's queues."""
        if not topic or not topic.strip():
            raise ValueError("the topic can not be blank")
        if self._state not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._state}")
        self._set_mode(_Mode.SUBSCRIBE)
        self._subscriptions[topic] = SubscriptionData.build(topic, expression)
        if listener is not None:
            self._queue_listener = listener
        if self._state == "running":
            self.instance.routes.watch(topic)
            self._spawn(partial(self._announce_subscriptions, [topic]), f"subscribe to {topic}")

    async def _announce_subscriptions(self, topics: list[str]) -> None:
        """Fetch the topics' routes, tell the brokers (heartbeat) and rebalance now."""
        instance = self.instance
        for topic in topics:
            try:
                await instance.routes.update(topic)
            except MQClientError as exc:
                log.warning("group %s: route of %s could not be fetched: %s", self.group, topic, exc)
        await instance.heartbeat()
        instance.rebalance_now()

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic``: its readers stop and its buffered messages are dropped."""
        self._subscriptions.pop(topic, None)
        for state in self._assigned.remove_topic(topic):
            self._stop_reader(state.mq)
            self._buffer.discard(state)
        if self._state == "running" and self._mode is _Mode.SUBSCRIBE:
            self._spawn(partial(self._announce_subscriptions, []), f"unsubscribe from {topic}")

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Read exactly these queues (replacing an earlier assignment), without group
        coordination. Readers start from the group's committed offsets (else as
        ``consume_from_where`` says), or where ``seek`` puts them."""
        queues = set(mqs)
        if not queues:
            raise ValueError("the message queues can not be empty")
        if self._state not in ("created", "running"):
            raise ClientStateError(f"the consumer is {self._state}")
        self._set_mode(_Mode.ASSIGN)
        removed, added = self._assigned.update(queues)
        for state in removed:
            self._stop_reader(state.mq)
            self._buffer.discard(state)
            if self._state == "running":
                self._spawn(partial(self._forget_offset, state.mq), f"offset of {state.mq}")
        if self._state == "running":
            for topic in {mq.topic for mq in queues}:
                self.instance.routes.watch(topic)
            self._start_readers(added)

    async def _forget_offset(self, mq: MessageQueue) -> None:
        """A queue left the assignment: persist what was committed for it, then forget it."""
        store = self.offset_store
        await store.persist(mq)
        if mq not in self._assigned:
            store.remove_offset(mq)

    def set_sub_expression_for_assign(self, topic: str, expression: str) -> None:
        """The tag expression readers of ``topic``'s assigned queues use (default ``"*"``);
        only before ``start``, as in Java."""
        if not expression or not expression.strip():
            raise ValueError("the sub expression can not be blank")
        if self._state != "created":
            raise ClientStateError("set_sub_expression_for_assign can only be called before start")
        self._set_mode(_Mode.ASSIGN)
        self._assign_expressions[topic] = expression

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer reads now (assigned, or given by the last rebalance)."""
        return self._assigned.queues()

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues (already buffered messages are still polled)."""
        self._assigned.pause(mqs)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        self._assigned.resume(mqs)

    def _subscription(self, topic: str) -> SubscriptionData | None:
        if self._mode is _Mode.SUBSCRIBE:
            return self._subscriptions.get(topic)
        sub = self._assign_subscriptions.get(topic)
        if sub is None:
            sub = SubscriptionData.build(topic, self._assign_expressions.get(topic, SUB_ALL), sub_version=0)
            self._assign_subscriptions[topic] = sub
        return sub

    # -- rebalance listener (subscribe mode) ---------------------------------------------
    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        """The rebalance computed the start offsets of new queues; the readers start there
        (Java computes them again in the reader, which may skip what arrived in between)."""
        for req in requests:
            self._start_offsets[req.message_queue] = (req.process_queue, req.next_offset)

    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        if self._state != "running" or topic not in self._subscriptions:
            return
        mine = mq_all if self.message_model is MessageModel.BROADCASTING else mq_divided
        removed, added = self._assigned.update(mine, topic)
        for state in removed:
            self._stop_reader(state.mq)
            self._buffer.discard(state)
        for state in added:
            start = self._start_offsets.pop(state.mq, None)
            if start is not None and start[0] is state.pq:
                state.pull_offset = start[1]
        self._start_readers(added)
        for mq in [mq for mq in self._start_offsets if mq.topic == topic]:
            del self._start_offsets[mq]
        listener = self._queue_listener
        if listener is not None:
            try:
                result = listener(topic, set(mq_all), set(mq_divided))
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("group %s: the message queue listener failed for %s", self.group, topic)

    # -- the readers ---------------------------------------------------------------------
    def _start_readers(self, states: Iterable[QueueState]) -> None:
        for state in states:
            if state.mq not in self._tasks:
                self._tasks[state.mq] = asyncio.get_running_loop().create_task(
                    self._reader(state), name=f"lite-pull {state.mq.topic}/{state.mq.broker_name}/{state.mq.queue_id}"
                )

    def _stop_reader(self, mq: MessageQueue) -> None:
        task = self._tasks.pop(mq, None)
        if task is not None:
            task.cancel()

    async def _reader(self, state: QueueState) -> None:
        """Pull one queue until it leaves the assignment (or the reader is replaced)."""
        while True:
            try:
                delay = await self._pull_once(state)
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must survive anything
                log.exception("group %s: reading %s failed", self.group, state.mq)
                delay = self.pull_time_delay_when_exception
            if delay is None:
                return
            if delay > 0:
                state.wakeup.clear()
                try:
                    async with asyncio.timeout(delay):
                        await state.wakeup.wait()
                except TimeoutError:
                    pass

    def _gone(self, state: QueueState, pq: ProcessQueue) -> bool:
        return self._state != "running" or pq.dropped or self._assigned.get(state.mq) is not state or state.pq is not pq

    def _flow_controlled(self, what: str, message: str, *args: Any) -> float:
        times = self._flow_control_times[what]
        self._flow_control_times[what] = times + 1
        if times % FLOW_CONTROL_LOG_EVERY == 0:
            log.warning("group %s: " + message + " (flow control #%d)", self.group, *args, times + 1)
        return PULL_DELAY_WHEN_CACHE_FLOW_CONTROL

    async def _pull_once(self, state: QueueState) -> float | None:
        """One step of a reader: the delay before the next step, None to stop."""
        pq = state.pq
        if self._gone(state, pq):
            return None
        if state.paused:
            return PULL_DELAY_WHEN_PAUSE
        if self._buffer.count > self.pull_threshold_for_all:
            return self._flow_controlled("all", "%d messages buffered", self._buffer.count)
        if state.buffered > self.pull_threshold_for_queue:
            return self._flow_controlled("queue", "%d messages of %s buffered", state.buffered, state.mq)
        if state.buffered_bytes >> 20 > self.pull_threshold_size_for_queue:
            return self._flow_controlled("queue", "%d MiB of %s buffered", state.buffered_bytes >> 20, state.mq)
        if state.buffered_span > self.consume_max_span:
            return self._flow_controlled("span", "buffered offsets of %s span %d", state.mq, state.buffered_span)

        offset = state.pull_offset
        if offset < 0:
            try:
                offset = await self.rebalance.compute_pull_from_where(state.mq)
            except Exception as exc:
                log.error("group %s: the start offset of %s could not be computed: %s", self.group, state.mq, exc)
                return PULL_DELAY_ON_OFFSET_EXCEPTION
            if self._gone(state, pq):
                return None
            if offset < 0:
                log.warning(
                    "group %s: no start offset for %s yet (the offset store cannot be read)", self.group, state.mq
                )
                return self.pull_time_delay_when_exception
            if state.pull_offset < 0:  # a seek meanwhile wins
                state.pull_offset = offset
            offset = state.pull_offset

        sub = self._subscription(state.mq.topic)
        if sub is None:  # unsubscribed
            return None
        try:
            result = await self._pull(state, offset, sub)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
            log.error("group %s: pulling %s at %d failed: %s", self.group, state.mq, offset, exc)
            return self.pull_time_delay_when_exception
        except MQClientError as exc:
            log.error("group %s: pulling %s at %d failed: %s", self.group, state.mq, offset, exc)
            if isinstance(exc, MQConnectError):
                self._spawn(partial(self._refresh_route, state.mq.topic), f"route refresh of {state.mq.topic}")
            return self.pull_time_delay_when_exception
        if self._gone(state, pq) or state.pull_offset != offset:
            return None if self._gone(state, pq) else 0.0  # dropped, or a seek moved the queue
        pq.mark_pulled()
        if result.status is PullStatus.FOUND and result.messages:
            self._buffer.put(state, pq, result.messages)
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "group %s: offset %d of %s is illegal (min %d, max %d); going on from %d",
                self.group,
                offset,
                state.mq,
                result.min_offset,
                result.max_offset,
                result.next_begin_offset,
            )
        state.idle = result.status is PullStatus.NO_NEW_MSG
        state.pull_offset = result.next_begin_offset
        return 0.0

    async def _pull(self, state: QueueState, offset: int, sub: SubscriptionData) -> PullResult:
        pull_api = self.instance.pull_api
        kwargs: dict[str, Any] = dict(
            expression=sub.sub_string,
            expression_type=sub.expression_type,
            sub_version=0 if sub.expression_type == "TAG" else sub.sub_version,
            suspend_ms=self.broker_suspend_max_time_millis,
            timeout=self.consumer_timeout_millis_when_suspend / 1000,
            lite=True,
        )
        if state.idle:  # a long poll that mostly waits: no permit
            return await pull_api.pull(state.mq, self.group, offset, self.pull_batch_size, **kwargs)
        async with self._permits:
            return await pull_api.pull(state.mq, self.group, offset, self.pull_batch_size, **kwargs)

    async def _refresh_route(self, topic: str) -> None:
        """After a connection failure: the name servers may already know the broker is gone."""
        now = self.clock.monotonic()
        if now - self._route_refreshed.get(topic, float("-inf")) < ROUTE_REFRESH_MIN_INTERVAL:
            return
        self._route_refreshed[topic] = now
        try:
            await self.instance.routes.update(topic)
        except MQClientError as exc:
            log.info("group %s: route of %s could not be refreshed: %s", self.group, topic, exc)

    # -- poll ----------------------------------------------------------------------------
    async def poll(self, timeout: float | None = None) -> list[MessageRecord]:
        """Up to ``consume_message_batch_max_size`` pulled messages; waits up to ``timeout``
        seconds (default ``poll_timeout_millis``) for the first, [] when none came."""
        self._check_running()
        if timeout is None:
            timeout = self.poll_timeout_millis / 1000
        if timeout < 0:
            raise ValueError("the poll timeout must not be negative")
        if self.auto_commit:
            self._maybe_auto_commit()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            out = self._buffer.take(self.consume_message_batch_max_size)
            if out or self._state != "running":
                return out
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                async with asyncio.timeout(remaining):  # no task per wait, unlike wait_for
                    await self._buffer.ready.wait()
            except TimeoutError:
                pass

    def _maybe_auto_commit(self) -> None:
        now = self.clock.monotonic()
        if now >= self._next_auto_commit:
            self.commit_sync()
            self._next_auto_commit = now + self.auto_commit_interval

    # -- positions -----------------------------------------------------------------------
    def _state_of(self, mq: MessageQueue) -> QueueState:
        state = self._assigned.get(mq)
        if state is None:
            extra = ", may be rebalancing" if self._mode is _Mode.SUBSCRIBE else ""
            raise MQClientError(f"the message queue is not in the assigned list{extra}: {mq}")
        return state

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next (also its consume offset now); what was buffered
        for it is discarded. ``offset`` must lie in [min offset, max offset] of the queue."""
        self._check_running()
        self._state_of(mq)
        pull_api = self.instance.pull_api
        low, high = await asyncio.gather(pull_api.min_offset(mq), pull_api.max_offset(mq))
        if not low <= offset <= high:
            raise MQClientError(
                f"seek offset {offset} of {mq} is illegal: outside [min offset {low}, max offset {high}]"
            )
        self._seek_now(self._state_of(mq), offset)

    def _seek_now(self, state: QueueState, offset: int) -> None:
        self._stop_reader(state.mq)
        self._buffer.discard(state)
        state.pull_offset = offset
        state.consume_offset = offset
        state.idle = False
        if self._state == "running":
            self._start_readers([state])

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
        offset = await self.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if offset == OFFSET_UNREADABLE:
            raise MQClientError(f"the committed offset of {mq} could not be fetched from the broker")
        return offset

    def commit_sync(self) -> None:
        """Commit the consume offset of every assigned queue (Java ``commitSync()``): into
        the offset store now, to the brokers with the next persist (every ``persist_interval``
        and at shutdown)."""
        store = self._offset_store
        if store is None:
            return
        for state in self._assigned.states():
            if state.consume_offset >= 0 and not state.pq.dropped:
                store.update_offset(state.mq, state.consume_offset, increase_only=False)

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None, persist: bool = True) -> None:
        """Commit ``offsets`` (queue -> the next offset to read; default: every assigned
        queue's consume offset) and, with ``persist``, write them to the brokers (the local
        file when broadcasting) now, raising the first failure.

        A queue this consumer does not read is committed only in assign mode and with
        ``persist`` (straight to the broker); in subscribe mode another member may own it,
        so it is skipped with a warning (Java skips it silently).
        """
        self._check_running()
        store = self.offset_store
        if offsets is None:
            offsets = {
                s.mq: s.consume_offset for s in self._assigned.states() if s.consume_offset >= 0 and not s.pq.dropped
            }
        mine: dict[MessageQueue, int] = {}
        direct: dict[MessageQueue, int] = {}
        for mq, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"the offset of {mq} is negative ({offset})")
            state = self._assigned.get(mq)
            if state is not None and not state.pq.dropped:
                store.update_offset(mq, offset, increase_only=False)
                mine[mq] = offset
            elif self._mode is not _Mode.SUBSCRIBE and persist:
                direct[mq] = offset
            else:
                log.warning(
                    "group %s: offset %d of %s not committed: the queue is not assigned here", self.group, offset, mq
                )
        if not persist:
            return
        if self.message_model is MessageModel.BROADCASTING:
            for mq, offset in direct.items():
                store.update_offset(mq, offset, increase_only=False)
            await store.persist_all(self._assigned.queues() | set(mine) | set(direct))
            return
        errors: list[Exception] = []
        for mq, offset in {**mine, **direct}.items():
            try:
                await store.update_consume_offset_to_broker(mq, offset, False)
            except MQClientError as exc:
                errors.append(exc)
                log.error("group %s: committing offset %d of %s failed: %s", self.group, offset, mq, exc)
        if errors:
            raise errors[0]

    async def _flush_offsets(self) -> None:
        """At shutdown: write every assigned queue's stored offset and wait for the answers
        (the periodic persist sends them oneway); all queues at once, so an unresponsive
        broker costs one request timeout, not one per queue."""
        store = self.offset_store
        queues = self._assigned.queues()
        if self.message_model is MessageModel.BROADCASTING or not isinstance(store, RemoteOffsetStore):
            await self.persist_offsets()
            return

        async def one(mq: MessageQueue, offset: int) -> None:
            try:
                await store.update_consume_offset_to_broker(mq, offset, False)
            except MQClientError as exc:
                log.error("group %s: committing offset %d of %s at shutdown failed: %s", self.group, offset, mq, exc)

        table = store.clone_offset_table()
        await asyncio.gather(*(one(mq, offset) for mq, offset in table.items() if mq in queues))

    # -- what the client instance calls --------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        subs = self._subscriptions.values() if self._mode is _Mode.SUBSCRIBE else ()
        return consumer_data(
            self.group,
            ConsumeType.CONSUME_ACTIVELY,
            self.message_model,
            self.consume_from_where,
            subs,
            unit_mode=self.unit_mode,
        )

    def subscribed_topics(self) -> set[str]:
        if self._mode is _Mode.SUBSCRIBE:
            return set(self._subscriptions)
        return self._assigned.topics()

    async def do_rebalance(self) -> None:
        if self._mode is _Mode.SUBSCRIBE and self._state == "running":
            await self.rebalance.do_rebalance(False)

    async def persist_offsets(self) -> None:
        """Persist the stored offsets of the queues read now (Java ``persistConsumerOffset``)."""
        if self._offset_store is None:
            return
        queues = self._assigned.queues()
        if self._mode is _Mode.SUBSCRIBE and self._rebalance is not None:
            queues = set(self._rebalance.process_queue_table)
        await self._offset_store.persist_all(queues)

    def running_info(self) -> dict[str, Any]:
        """``ConsumerRunningInfo``: the settings as Java names them and the subscriptions."""
        props = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "allocateMessageQueueStrategy": self.allocate_strategy.name,
            "pullBatchSize": self.pull_batch_size,
            "pullThreadNums": self.pull_threads_nums,
            "pullThresholdForAll": self.pull_threshold_for_all,
            "pullThresholdForQueue": self.pull_threshold_for_queue,
            "pullThresholdSizeForQueue": self.pull_threshold_size_for_queue,
            "consumeMaxSpan": self.consume_max_span,
            "pollTimeoutMillis": self.poll_timeout_millis,
            "autoCommit": self.auto_commit,
            "autoCommitIntervalMillis": int(self.auto_commit_interval * 1000),
            "topicMetadataCheckIntervalMillis": int(self.topic_metadata_check_interval * 1000),
            "brokerSuspendMaxTimeMillis": self.broker_suspend_max_time_millis,
            "consumerTimeoutMillisWhenSuspend": self.consumer_timeout_millis_when_suspend,
            "unitMode": self.unit_mode,
            "instanceName": self.instance_name,
            "clientIP": self.client_ip,
            "namesrvAddr": self.namesrv_addrs if isinstance(self.namesrv_addrs, str) else ";".join(self.namesrv_addrs),
            "PROP_CONSUMER_START_TIMESTAMP": self._start_timestamp,
        }
        subs = self._subscriptions.values() if self._mode is _Mode.SUBSCRIBE else ()
        return {
            "properties": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in props.items()},
            "subscriptionSet": [s.to_json() for s in subs],
            "mqTable": {},
            "statusTable": {},
        }

    # -- topic metadata ------------------------------------------------------------------
    def register_topic_message_queue_change_listener(
        self, topic: str, listener: TopicMessageQueueChangeListener
    ) -> None:
        """Call ``listener(topic, queues)`` (a plain or async function) whenever the topic's
        queues change; checked every ``topic_metadata_check_interval`` (first after 10 s)."""
        if not topic or listener is None:
            raise MQClientError("the topic or the listener is missing")
        if topic in self._topic_listeners:
            log.warning("group %s: a new queue change listener of %s replaces the old one", self.group, topic)
        self._topic_listeners[topic] = listener
        if self._state == "running":
            self._spawn(partial(self._baseline_queues, topic), f"queues of {topic}")

    async def _baseline_queues(self, topic: str) -> None:
        self._topic_queues[topic] = await self.fetch_message_queues(topic)

    async def _metadata_loop(self) -> None:
        await asyncio.sleep(min(TOPIC_METADATA_FIRST_CHECK, self.topic_metadata_check_interval))
        while True:
            try:
                await self._check_topic_queues()
            except Exception:  # the loop must survive anything
                log.exception("group %s: checking the topics' queues failed", self.group)
            await asyncio.sleep(self.topic_metadata_check_interval)

    async def _check_topic_queues(self) -> None:
        for topic, listener in list(self._topic_listeners.items()):
            try:
                queues = set(await self.instance.routes.find_subscribe_queues(topic, refresh=True))
            except MQClientError as exc:
                log.warning("group %s: the queues of %s could not be fetched: %s", self.group, topic, exc)
                continue
            if queues == self._topic_queues.get(topic):
                continue
            self._topic_queues[topic] = queues
            try:
                result = listener(topic, set(queues))
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("group %s: the queue change listener of %s failed", self.group, topic)
