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

from ledgermq.client.consumer.common import MessageModel
from ledgermq.client.consumer.offset_store import ReadOffsetType
from ledgermq.client.consumer.parts import BackgroundTasks, ConsumerParts
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.consumer.rebalance import PullRequest
from ledgermq.client.errors import MQBrokerError
from ledgermq.client.instance.pull_result import PullStatus
from ledgermq.client.push.consume_service import ConsumeMessageService
from ledgermq.client.push.pull_decider import (
    MIB,
    PULL_DELAY_WHEN_SUSPENDED,
    AfterPull,
    Limits,
    PullNow,
    PullOutcome,
    QueueFacts,
    StartOffsetNeeded,
    Stop,
    Wait,
    after_pull,
    before_pull,
    start_offset,
)
from ledgermq.client.push.state import PushState
from ledgermq.errors import LedgerError
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from ledgermq.util.ratelog import limited

__all__ = ["MIB", "PULL_DELAY_WHEN_SUSPENDED", "PullLoops"]

# the consumer's logger: what its pulls report belongs to it
log = logging.getLogger("ledgermq.client.push.consumer")


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
        """One ``pullMessage`` round: the delay before the next one, None to stop. What to do
        is ``pull_decider``'s; this carries it out."""
        pq, mq = req.process_queue, req.message_queue
        limits = self._limits()
        decision = before_pull(self._facts(req), limits)
        if isinstance(decision, StartOffsetNeeded):
            found = await self._start_offset(mq)
            start = start_offset(found, limits)
            if isinstance(start, Wait):
                return start.delay
            if start < req.next_offset:
                log.info("group %s: %s locked; starting at the broker's offset %d", self._state.group, mq, start)
            req.previously_locked = True
            req.next_offset = start
            decision = before_pull(self._facts(req), limits)
        if isinstance(decision, Stop):
            log.info("group %s: %s is %s; its pulls stop", self._state.group, mq, decision.why)
            return None
        if isinstance(decision, Wait):
            if decision.flow_control is not None:
                self._flow_controlled(mq, pq, decision.flow_control)
            else:
                log.debug("group %s: %s not pulled: %s", self._state.group, mq, decision.why)
            return decision.delay
        if not isinstance(decision, PullNow):
            raise AssertionError(f"unexpected decision {decision!r}")  # StartOffsetNeeded twice
        asked = req.next_offset
        outcome, messages = await self._pull(req)
        act = after_pull(outcome, asked, limits)
        self._carry_out(req, act, messages, asked)
        return act.delay

    def _limits(self) -> Limits:
        state, settings = self._state, self._settings
        return Limits(
            threshold_count=state.queue_threshold_count,
            threshold_mib=state.queue_threshold_mib,
            max_span=settings.consume_concurrently_max_span,
            flow_control_delay=settings.flow_control_delay,
            pull_delay_when_exception=settings.pull_delay_when_exception,
            pull_interval=settings.pull_interval,
        )

    def _facts(self, req: PullRequest) -> QueueFacts:
        """The queue's state now; marks it pulled (the rebalance drops queues whose loop died)."""
        pq, state = req.process_queue, self._state
        if not pq.dropped:
            pq.mark_pulled()
        return QueueFacts(
            dropped=pq.dropped,
            paused=state.paused,
            cached_count=pq.msg_count,
            cached_bytes=pq.msg_size,
            span=pq.max_span if not state.orderly else 0,
            orderly=state.orderly,
            locked=pq.locked,
            previously_locked=req.previously_locked,
            subscribed=req.message_queue.topic in state.subscriptions,
        )

    async def _start_offset(self, mq: MessageQueue) -> int | None:
        """Where an orderly consumer starts once locked; None (logged) when unreadable."""
        group = self._state.group
        try:
            return await self._parts.rebalance.compute_pull_from_where(mq)
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
            return None

    async def _pull(self, req: PullRequest) -> tuple[PullOutcome, list[MessageRecord]]:
        """The pull itself, its outcome as facts (a failure logged and reduced to its code)."""
        state, settings, parts, group = self._state, self._settings, self._parts, self._state.group
        pq, mq = req.process_queue, req.message_queue
        sub = state.subscriptions[mq.topic]  # before_pull saw it; nothing awaited since
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
                post_subscription=settings.post_subscription_when_pull,
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
            code = exc.code if isinstance(exc, MQBrokerError) else 0
            return PullOutcome(dropped=pq.dropped, error=code), []
        limited.reset(("pull", group, mq.broker_name))
        msgs = result.messages
        if result.status is PullStatus.FOUND:
            state.stats.pulled(mq.topic, (state.clock.monotonic() - begin) * 1000, len(msgs))
        outcome = PullOutcome(
            dropped=pq.dropped,
            status=result.status,
            next_begin_offset=result.next_begin_offset,
            message_count=len(msgs),
            first_queue_offset=msgs[0].queue_offset if msgs else None,
            cached_count=pq.msg_count,
            # filtered by a subscription replaced while the pull was out (held, say)
            stale=state.subscriptions.get(mq.topic) is not sub,
        )
        return outcome, msgs

    def _carry_out(self, req: PullRequest, act: AfterPull, msgs: list[MessageRecord], asked: int) -> None:
        """``after_pull``'s decision, in the order its fields list."""
        group, pq, mq = self._state.group, req.process_queue, req.message_queue
        if act.next_offset is not None:
            req.next_offset = act.next_offset
        if act.went_back:
            limited.log(
                log,
                logging.WARNING,
                ("before-offset", group, mq),
                "group %s: %s answered data before offset %d (next %d)",
                group,
                mq,
                asked,
                req.next_offset,
            )
        if act.deliver:
            dispatch = pq.put_message(msgs)
            self._service.submit(msgs, pq, mq, dispatch)
        if act.commit:
            self._parts.offset_store.update_offset(mq, req.next_offset, increase_only=True)
        if act.fix_offset:
            log.warning("group %s: offset %d of %s is illegal; restarting at %d", group, asked, mq, req.next_offset)
            pq.dropped = True
            fix = functools.partial(self.fix_offset_later, mq, pq, req.next_offset)
            self._background.spawn(fix, f"fixing the offset of {mq}")

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
