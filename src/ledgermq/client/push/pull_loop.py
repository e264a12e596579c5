"""The push consumer's pull loops (RocketMQ 4.9.7 ``DefaultMQPushConsumerImpl.pullMessage``):
one asyncio task per assigned queue, long-polling (the broker holds an empty pull for up
to ``broker_suspend_max_time`` seconds) and handing what it gets to the consume service.

A loop stops pulling while its queue's cache holds more than ``pull_threshold_for_queue``
messages or ``pull_threshold_size_for_queue`` MiB, or (concurrently) spans more than
``consume_concurrently_max_span`` offsets, checking again every ``flow_control_delay``;
an orderly consumer pulls a queue only while it holds the queue's broker lock, and starts
at the broker's committed offset the first time it does. Every pull to the master carries
the queue's offset in memory (the commit-offset flag). An OFFSET_ILLEGAL answer stops the
loop; the offset is fixed and the queue handed back to the rebalance later.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence

from ledgermq.client.consumer.common import PULL_DELAY_WHEN_BROKER_FLOW_CONTROL, MessageModel
from ledgermq.client.consumer.offset_store import ReadOffsetType
from ledgermq.client.consumer.parts import BackgroundTasks, ConsumerParts
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.consumer.rebalance import PullRequest
from ledgermq.client.errors import MQBrokerError
from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.client.push.consume_service import ConsumeMessageService
from ledgermq.client.push.state import PushState
from ledgermq.errors import LedgerError
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.util.ratelog import limited

__all__ = ["MIB", "PULL_DELAY_WHEN_SUSPENDED", "PullLoops"]

# the consumer's logger: what its pulls report belongs to it
log = logging.getLogger("ledgermq.client.push.consumer")

MIB = 1024 * 1024
PULL_DELAY_WHEN_SUSPENDED = 1.0


class PullLoops:
    """The pull tasks of one started consumer, by process queue. The state is read at every
    pull: the per-queue thresholds change with the number of queues when topic-wide
    thresholds are set, and the consumer may be paused."""

    def __init__(
        self,
        state: PushState,
        parts: ConsumerParts,
        service: ConsumeMessageService,
        background: BackgroundTasks,
        pull_once: Callable[[PullRequest], Awaitable[float | None]] | None = None,
    ) -> None:
        """``pull_once`` is the round a loop runs (default: ``self.pull_once``); the consumer
        gives its own public ``pull_once`` so that what is there is what runs."""
        self._state = state
        self._settings = state.settings
        self._parts = parts
        self._service = service
        self._background = background
        self._round = pull_once or self.pull_once
        self._tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        self._flow_control_times = 0

    def dispatch(self, requests: Sequence[PullRequest]) -> None:
        """A loop for each new queue, replacing an old loop of the same process queue."""
        for req in requests:
            old = self._tasks.pop(req.process_queue, None)
            if old is not None:
                old.cancel()
            task = asyncio.get_running_loop().create_task(
                self._loop(req), name=f"pull-{req.message_queue.topic}-{req.message_queue.queue_id}"
            )
            self._tasks[req.process_queue] = task
            task.add_done_callback(functools.partial(self._forget, req.process_queue))
            log.info("group %s: pulling %s from offset %d", self._state.group, req.message_queue, req.next_offset)

    def _forget(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._tasks.get(pq) is task:
            del self._tasks[pq]

    def cancel_dropped(self) -> None:
        """After a rebalance: a dropped queue's loop need not wait out its long poll."""
        for pq, task in list(self._tasks.items()):
            if pq.dropped:
                task.cancel()

    def cancel(self) -> list[asyncio.Task[None]]:
        """At shutdown: cancel every loop; the caller awaits them."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        return tasks

    def clear(self) -> None:
        """After shutdown awaited the cancelled loops: forget them, finished or not."""
        self._tasks.clear()

    async def _loop(self, req: PullRequest) -> None:
        """One queue's pulls until its process queue is dropped or the consumer stops."""
        while self._state.active:
            try:
                delay = await self._round(req)
            except asyncio.CancelledError:
                raise
            except Exception:
                limited.log(
                    log,
                    logging.ERROR,
                    ("pull-bug", self._state.group, req.message_queue),
                    "group %s: pulling %s failed",
                    self._state.group,
                    req.message_queue,
                    exc_info=True,
                )
                delay = self._settings.pull_delay_when_exception
            if delay is None:
                return
            if delay > 0:
                await asyncio.sleep(delay)

    async def pull_once(self, req: PullRequest) -> float | None:
        """One ``pullMessage`` round: the delay before the next one, None to stop."""
        state, settings, parts = self._state, self._settings, self._parts
        group = state.group
        pq, mq = req.process_queue, req.message_queue
        if pq.dropped:
            log.info("group %s: %s is dropped; its pulls stop", group, mq)
            return None
        pq.mark_pulled()
        if state.paused:
            return PULL_DELAY_WHEN_SUSPENDED
        if pq.msg_count > state.queue_threshold_count or pq.msg_size // MIB > state.queue_threshold_mib:
            self._flow_controlled(mq, pq, "cache")
            return settings.flow_control_delay
        if not state.orderly:
            if pq.max_span > settings.consume_concurrently_max_span:
                self._flow_controlled(mq, pq, "span")
                return settings.flow_control_delay
        elif pq.locked:
            if not req.previously_locked:
                try:
                    offset = await parts.rebalance.compute_pull_from_where(mq)
                except Exception as exc:
                    limited.persisting(
                        log,
                        logging.WARNING,
                        ("start-offset", group, mq),
                        "group %s: the start offset of %s could not be computed: %s",
                        group,
                        mq,
                        exc,
                        grace=30.0,
                    )
                    return settings.pull_delay_when_exception
                if offset < 0:
                    return settings.pull_delay_when_exception
                if offset < req.next_offset:
                    log.info("group %s: %s locked; starting at the broker's offset %d", group, mq, offset)
                req.previously_locked = True
                req.next_offset = offset
        else:
            log.debug("group %s: %s is not locked yet; pulling later", group, mq)
            return settings.pull_delay_when_exception
        sub = state.subscriptions.get(mq.topic)
        if sub is None:
            log.debug("group %s: no subscription for %s (unsubscribed; the rebalance drops it)", group, mq)
            return settings.pull_delay_when_exception

        commit_offset = 0
        if settings.message_model is MessageModel.CLUSTERING:
            memory = await parts.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            commit_offset = max(memory, 0)
        begin = state.clock.monotonic()
        try:
            result = await parts.pull_api.pull(
                mq,
                group,
                req.next_offset,
                settings.pull_batch_size,
                expression=sub.sub_string,
                expression_type=sub.expression_type,
                sub_version=sub.sub_version,
                commit_offset=commit_offset,
                suspend_ms=int(settings.broker_suspend_max_time * 1000),
                timeout=settings.consumer_timeout_when_suspend,
            )
        except LedgerError as exc:
            if not mq.topic.startswith("%RETRY%"):
                # SUBSCRIPTION_NOT_EXIST / _NOT_LATEST before the heartbeat lands, a broker
                # restarting: normal for a while; one key per broker, not per queue
                limited.persisting(
                    log,
                    logging.WARNING,
                    ("pull", group, mq.broker_name),
                    "group %s: pull of %s failed: %s",
                    group,
                    mq,
                    exc,
                    grace=30.0,
                )
            if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
            return settings.pull_delay_when_exception
        limited.reset(("pull", group, mq.broker_name))
        if pq.dropped:
            return None

        if result.status is PullStatus.FOUND:
            prev = req.next_offset
            req.next_offset = result.next_begin_offset
            msgs = result.messages
            state.stats.pulled(mq.topic, (state.clock.monotonic() - begin) * 1000, len(msgs))
            if result.next_begin_offset < prev or (msgs and msgs[0].queue_offset < prev):
                limited.log(
                    log,
                    logging.WARNING,
                    ("before-offset", group, mq),
                    "group %s: %s answered data before offset %d (next %d)",
                    group,
                    mq,
                    prev,
                    result.next_begin_offset,
                )
            if not msgs:
                return 0.0
            dispatch = pq.put_message(msgs)
            self._service.submit(msgs, pq, mq, dispatch)
            return settings.pull_interval
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset: nothing in flight, the offset may move on
                parts.offset_store.update_offset(mq, req.next_offset, increase_only=True)
            return 0.0
        # OFFSET_ILLEGAL: stop here, record where to restart, let the rebalance re-add the queue
        log.warning(
            "group %s: offset %d of %s is illegal; restarting at %d",
            group,
            req.next_offset,
            mq,
            result.next_begin_offset,
        )
        req.next_offset = result.next_begin_offset
        pq.dropped = True
        offset = req.next_offset
        self._background.spawn(functools.partial(self.fix_offset_later, mq, pq, offset), f"fixing the offset of {mq}")
        return None

    async def fix_offset_later(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """After an illegal offset: commit where the broker said to restart, then let the
        rebalance take the queue up afresh from there."""
        parts, group = self._parts, self._state.group
        await asyncio.sleep(self._settings.offset_illegal_fix_delay)
        if parts.rebalance.process_queue_table.get(mq) is not pq:
            # Rebalanced away meanwhile (unlike Java, which commits anyway): the new owner's
            # progress must not be overwritten, nor a queue taken back since dropped again.
            log.info("group %s: %s is no longer ours; its illegal offset is left to its owner", group, mq)
            return
        parts.offset_store.update_offset(mq, offset, increase_only=False)
        await parts.offset_store.persist(mq)
        await parts.rebalance.remove_process_queue(mq, self._state.orderly)
        log.info("group %s: offset of %s fixed to %d", group, mq, offset)

    def _flow_controlled(self, mq: MessageQueue, pq: ProcessQueue, why: str) -> None:
        if self._flow_control_times % 1000 == 0:  # the listener is slower than the pulls
            limited.log(
                log,
                logging.WARNING,
                ("flow-control", self._state.group),
                "group %s: flow control (%s) on %s: %d messages, %d MiB cached, span %d (%d times)",
                self._state.group,
                why,
                mq,
                pq.msg_count,
                pq.msg_size // MIB,
                pq.max_span,
                self._flow_control_times,
            )
        self._flow_control_times += 1
