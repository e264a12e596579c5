"""The lite pull consumer's readers: one task per assigned queue that pulls
``pull_batch_size`` messages at a time and appends each batch to the consumer's buffer,
where ``poll`` finds them (RocketMQ 4.9.7 ``DefaultLitePullConsumerImpl.PullTaskImpl``).

Pulls long-poll: the broker holds one up to ``broker_suspend_max_time_millis`` when the
queue has nothing new. Readers back off as Java's do: 50 ms while the buffer or their
queue is over a flow-control threshold, 20 ms after a broker FLOW_CONTROL answer,
``pull_time_delay_millis_when_exception`` (1 s) after a failed pull, 3 s when the start
offset cannot be computed; a paused queue's reader waits until ``resume``. At most
``pull_threads_nums`` pulls transfer messages at once; a queue whose last pull found
nothing new long-polls outside that limit, so idle queues never hold back busy ones
(Java's pull threads block in those long polls).

Pulls go to the master, or to a slave while the master is away from the route
(``PullAPI``); after a connection failure the reader refreshes the topic's route (at most
once a second per topic), so a dead master is left within about a second rather than at
the next 30 s route refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

from ledgermq.client.consumer.common import PULL_DELAY_WHEN_BROKER_FLOW_CONTROL, SubscriptionData
from ledgermq.client.consumer.parts import BackgroundTasks
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.pull_api import PullResult, PullStatus
from ledgermq.client.lite_pull.assigned_queues import AssignedQueues, ConsumeBuffer, QueueState
from ledgermq.client.lite_pull.plan import ReadPlan
from ledgermq.client.lite_pull.state import LitePullState
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.util.ratelog import limited

__all__ = [
    "FLOW_CONTROL_LOG_EVERY",
    "PULL_DELAY_ON_OFFSET_EXCEPTION",
    "PULL_DELAY_WHEN_BROKER_FLOW_CONTROL",
    "PULL_DELAY_WHEN_CACHE_FLOW_CONTROL",
    "PULL_DELAY_WHEN_PAUSE",
    "ROUTE_REFRESH_MIN_INTERVAL",
    "QueueReaders",
]

# the consumer's logger: what its readers report belongs to it
log = logging.getLogger("ledgermq.client.lite_pull.consumer")

PULL_DELAY_WHEN_CACHE_FLOW_CONTROL = 0.05
PULL_DELAY_WHEN_PAUSE = 1.0
PULL_DELAY_ON_OFFSET_EXCEPTION = 3.0
ROUTE_REFRESH_MIN_INTERVAL = 1.0
FLOW_CONTROL_LOG_EVERY = 1000


class QueueReaders:
    """The reader tasks of one consumer, by queue. The consumer's settings are read at every
    pull (they are public attributes, and Java lets them change while running); what the
    readers share with the rest of the consumer is given here."""

    def __init__(
        self,
        state: LitePullState,
        plan: ReadPlan,
        buffer: ConsumeBuffer,
        background: BackgroundTasks,
    ) -> None:
        self._state = state
        self._plan = plan
        self._assigned: AssignedQueues = plan.assigned
        self._buffer = buffer
        self._background = background
        self._tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._permits = asyncio.Semaphore(state.settings.pull_threads_nums)
        self._route_refreshed: dict[str, float] = {}
        self._flow_control_times = {"all": 0, "queue": 0, "span": 0}

    def start(self, states: Iterable[QueueState]) -> None:
        """A reader for each queue that has none (a queue keeps at most one)."""
        for state in states:
            if state.mq not in self._tasks:
                self._tasks[state.mq] = asyncio.get_running_loop().create_task(
                    self._read(state), name=f"lite-pull {state.mq.topic}/{state.mq.broker_name}/{state.mq.queue_id}"
                )

    def stop(self, mq: MessageQueue) -> None:
        task = self._tasks.pop(mq, None)
        if task is not None:
            task.cancel()

    def drop(self, state: QueueState) -> None:
        """Stop reading a queue and forget what was buffered for it: it left the assignment,
        or a seek makes what was pulled from the old position stale."""
        self.stop(state.mq)
        self._buffer.discard(state)

    def replace(self, removed: Iterable[QueueState], added: Iterable[QueueState]) -> None:
        """The assignment changed: drop the queues that left, read the ones that came."""
        for state in removed:
            self.drop(state)
        self.start(added)

    def cancel(self) -> list[asyncio.Task[None]]:
        """At shutdown: cancel every reader; the caller awaits them."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        return tasks

    async def _read(self, state: QueueState) -> None:
        """Pull one queue until it leaves the assignment (or the reader is replaced)."""
        while True:
            # Cleared before the pull, not after: a resume() that lands while the pull is in
            # flight (which then reports the pause's delay) must still end the wait at once.
            state.wakeup.clear()
            try:
                delay = await self.pull_once(state)
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must survive anything
                limited.log(
                    log,
                    logging.ERROR,
                    ("read-bug", self._state.group, state.mq),
                    "group %s: reading %s failed",
                    self._state.group,
                    state.mq,
                    exc_info=True,
                )
                delay = self._state.settings.pull_time_delay_when_exception
            if delay is None:
                return
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await state.wakeup.wait()
                except TimeoutError:
                    pass

    def _gone(self, state: QueueState, pq: ProcessQueue) -> bool:
        return not self._state.running or pq.dropped or self._assigned.get(state.mq) is not state or state.pq is not pq

    def _flow_controlled(self, what: str, message: str, *args: Any) -> float:
        times = self._flow_control_times[what]
        self._flow_control_times[what] = times + 1
        if times % FLOW_CONTROL_LOG_EVERY == 0:
            limited.log(  # the application polls more slowly than the readers pull
                log,
                logging.WARNING,
                ("flow-control", self._state.group, what),
                "group %s: " + message + " (flow control #%d)",
                self._state.group,
                *args,
                times + 1,
            )
        return PULL_DELAY_WHEN_CACHE_FLOW_CONTROL

    def _pull_failed(self, state: QueueState, offset: int, exc: Exception) -> None:
        """Normal for a while (the group before its first heartbeat, a broker restarting);
        a warning once it lasts, one key per broker rather than per queue."""
        group = self._state.group
        limited.persisting(
            log,
            logging.WARNING,
            ("pull", group, state.mq.broker_name),
            "group %s: pulling %s at %d failed: %s",
            group,
            state.mq,
            offset,
            exc,
            grace=30.0,
        )

    async def pull_once(self, state: QueueState) -> float | None:
        """One step of a reader: the delay before the next step, None to stop."""
        shared = self._state
        pq = state.pq
        if self._gone(state, pq):
            return None
        if state.paused:
            return PULL_DELAY_WHEN_PAUSE
        if self._buffer.count > shared.settings.pull_threshold_for_all:
            return self._flow_controlled("all", "%d messages buffered", self._buffer.count)
        if state.buffered > shared.settings.pull_threshold_for_queue:
            return self._flow_controlled("queue", "%d messages of %s buffered", state.buffered, state.mq)
        if state.buffered_bytes >> 20 > shared.settings.pull_threshold_size_for_queue:
            return self._flow_controlled("queue", "%d MiB of %s buffered", state.buffered_bytes >> 20, state.mq)
        if state.buffered_span > shared.settings.consume_max_span:
            return self._flow_controlled("span", "buffered offsets of %s span %d", state.mq, state.buffered_span)

        offset = state.pull_offset
        if offset < 0:
            try:
                offset = await shared.started.rebalance.compute_pull_from_where(state.mq)
            except Exception as exc:
                limited.persisting(
                    log,
                    logging.WARNING,
                    ("start-offset", shared.group, state.mq),
                    "group %s: the start offset of %s could not be computed: %s",
                    shared.group,
                    state.mq,
                    exc,
                    grace=30.0,
                )
                return PULL_DELAY_ON_OFFSET_EXCEPTION
            if self._gone(state, pq):
                return None
            if offset < 0:
                log.debug(  # the offset store logged why (rate-limited)
                    "group %s: no start offset for %s yet (the offset store cannot be read)", shared.group, state.mq
                )
                return shared.settings.pull_time_delay_when_exception
            if state.pull_offset < 0:  # a seek meanwhile wins
                state.pull_offset = offset
            offset = state.pull_offset

        sub = self._plan.subscription(state.mq.topic)
        if sub is None:  # unsubscribed
            return None
        try:
            result = await self._pull(state, offset, sub)
        except MQBrokerError as exc:
            if exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
            self._pull_failed(state, offset, exc)
            return shared.settings.pull_time_delay_when_exception
        except MQClientError as exc:
            self._pull_failed(state, offset, exc)
            if isinstance(exc, MQConnectError):
                topic = state.mq.topic
                self._background.spawn(partial(self._refresh_route, topic), f"route refresh of {topic}")
            return shared.settings.pull_time_delay_when_exception
        limited.reset(("pull", shared.group, state.mq.broker_name))
        if self._gone(state, pq) or state.pull_offset != offset:
            return None if self._gone(state, pq) else 0.0  # dropped, or a seek moved the queue
        pq.mark_pulled()
        if result.status is PullStatus.FOUND and result.messages:
            self._buffer.put(state, pq, result.messages)
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "group %s: offset %d of %s is illegal (min %d, max %d); going on from %d",
                shared.group,
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
        shared = self._state
        pull_api = shared.started.instance.pull_api
        kwargs: dict[str, Any] = dict(
            expression=sub.sub_string,
            expression_type=sub.expression_type,
            sub_version=0 if sub.expression_type == "TAG" else sub.sub_version,
            suspend_ms=shared.settings.broker_suspend_max_time_millis,
            timeout=shared.settings.consumer_timeout_millis_when_suspend / 1000,
            lite=True,
        )
        if state.idle:  # a long poll that mostly waits: no permit
            return await pull_api.pull(state.mq, shared.group, offset, shared.settings.pull_batch_size, **kwargs)
        async with self._permits:
            return await pull_api.pull(state.mq, shared.group, offset, shared.settings.pull_batch_size, **kwargs)

    async def _refresh_route(self, topic: str) -> None:
        """After a connection failure: the name servers may already know the broker is gone."""
        shared = self._state
        now = shared.clock.monotonic()
        if now - self._route_refreshed.get(topic, float("-inf")) < ROUTE_REFRESH_MIN_INTERVAL:
            return
        self._route_refreshed[topic] = now
        try:
            await shared.started.instance.routes.update(topic)
        except MQClientError as exc:
            log.info("group %s: route of %s could not be refreshed: %s", shared.group, topic, exc)
