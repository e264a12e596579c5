"""Running the user's listener over pulled messages (RocketMQ 4.9.7
``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService``).

A listener is either a plain function, run in a thread pool of ``consume_thread_max``
workers so it may block, or an ``async def`` function awaited on the event loop. Either
way at most ``consume_thread_max`` batches are in listeners at once.

Concurrently: every pulled batch is cut into ``consume_message_batch_max_size`` pieces
consumed in parallel. Messages the listener fails (RECONSUME_LATER, an exception, or past
``ack_index``) go back to the broker (CONSUMER_SEND_MSG_BACK, which stores them in the
group's retry topic with a delay, or in its DLQ after ``max_reconsume_times``); when the
broker cannot be told, a copy is sent to the retry topic through a producer; when even
that fails they are consumed again locally after 5 s. Broadcasting consumers drop failed
messages with a log, as Java does. The committed offset is the process queue's smallest
in-flight offset.

Orderly consumption is in ``consume_orderly.py``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ledgermq.client.consumer.common import MessageModel, dlq_topic, retry_topic
from ledgermq.client.consumer.parts import ConsumerParts
from ledgermq.client.consumer.process_queue import PROPERTY_CONSUME_START_TIME, ProcessQueue
from ledgermq.client.message import Message
from ledgermq.client.push.consume_workers import ConsumeWorkers
from ledgermq.client.push.inner_producer import InnerProducer
from ledgermq.client.push.state import PushState
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from ledgermq.util.ratelog import limited

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeMessageConcurrentlyService",
    "ConsumeMessageService",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "reset_retry_topic",
]

log = logging.getLogger(__name__)

MAX_TIME_CONSUME_CONTINUOUSLY = 60.0
"""Seconds one orderly run may keep a queue before it yields (``maxTimeConsumeContinuously``)."""
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
INT_MAX = 2**31 - 1


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    # Only meaningful with auto_commit False (deprecated in Java, kept for its semantics).
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """What a concurrent listener may tell about its batch.

    ``ack_index``: on CONSUME_SUCCESS, the messages after this index count as failed.
    ``delay_level_when_next_consume``: the delay level of the retry (0: the broker
    chooses 3 + reconsume times; -1: straight to the DLQ).
    """

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = INT_MAX


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


Listener = Callable[[list[MessageRecord], Any], Any]


def reset_retry_topic(msgs: Sequence[MessageRecord], group: str) -> None:
    """Messages pulled from the group's retry topic get their original topic back
    (``resetRetryAndNamespace``)."""
    rt = retry_topic(group)
    for msg in msgs:
        origin = msg.properties.get(P.RETRY_TOPIC)
        if origin and msg.topic == rt:
            msg.topic = origin


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


class ConsumeMessageService:
    """What both services share: the listener call, the worker pool, task bookkeeping."""

    orderly = False

    def __init__(
        self,
        state: PushState,
        parts: ConsumerParts,
        listener: Listener,
        inner_producer: Callable[[], Awaitable[InnerProducer]],
    ) -> None:
        """``inner_producer()`` gives the producer failed messages are re-sent through."""
        self.state = state
        self.settings = state.settings
        self.parts = parts
        self.clock = state.clock
        self.listener = listener
        self.inner_producer = inner_producer
        self.is_async = _is_async(listener)
        self.max_workers = state.settings.consume_thread_max
        self.executor: ThreadPoolExecutor | None = None
        self.slots = asyncio.Semaphore(self.max_workers)
        self.stopped = False
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def group(self) -> str:
        return self.state.group

    def start(self) -> None:
        if not self.is_async:
            self.executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix=f"consume-{self.group}")

    async def shutdown(self) -> None:
        self.stopped = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("group %s: a consume task failed at shutdown", self.group)
        if self.executor is not None:
            # running listeners finish in their threads; nothing waits for them here
            self.executor.shutdown(wait=False, cancel_futures=True)

    def spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``coro`` as a task whose failure is logged (never lost, never fatal)."""
        if self.stopped:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(self.guarded(coro, what))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def guarded(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        """Await ``coro``; a failure is logged (rate-limited), never raised."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            limited.log(
                log,
                logging.ERROR,
                ("task", self.group, what),
                "group %s: %s failed",
                self.group,
                what,
                exc_info=True,
            )

    def later(self, delay: float, fn: Callable[[], Awaitable[None] | None], what: str) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            result = fn()
            if result is not None:
                await result

        self.spawn(run(), what)

    async def call_listener(self, msgs: list[MessageRecord], context: Any) -> Any:
        """The listener's answer, holding one worker slot; exceptions propagate."""
        async with self.slots:
            return await self.call_in_pool(msgs, context)

    async def call_in_pool(self, msgs: list[MessageRecord], context: Any) -> Any:
        """The listener's answer without taking a slot: for a caller that is one of the
        consume pool's ``max_workers`` tasks, which bound the calls already."""
        if self.is_async:
            return await self.listener(msgs, context)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, self.listener, msgs, context)
        if inspect.isawaitable(result):
            return await result
        return result

    def submit(self, msgs: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        raise NotImplementedError

    async def consume_directly(self, msg: MessageRecord, broker_name: str) -> dict[str, Any]:
        raise NotImplementedError

    async def _directly(self, msg: MessageRecord, context: Any, ok: set[Any], later: set[Any]) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY's ``ConsumeMessageDirectlyResult``."""
        reset_retry_topic([msg], self.group)
        begin = self.clock.monotonic()
        remark = None
        try:
            status = coerce_status(await self.call_listener([msg], context), type(next(iter(ok))))
            if status is None:
                result = "CR_RETURN_NULL"
            elif status in ok:
                result = "CR_SUCCESS"
            elif status in later:
                result = "CR_LATER"
            elif status is ConsumeOrderlyStatus.COMMIT:
                result = "CR_COMMIT"
            else:
                result = "CR_ROLLBACK"
        except Exception as exc:
            limited.log(
                log,
                logging.WARNING,
                ("listener", self.group),
                "group %s: the listener raised on direct consumption of %s",
                self.group,
                msg.msg_id,
                exc_info=True,
            )
            result = "CR_THROW_EXCEPTION"
            remark = f"{type(exc).__name__}: {exc}"
        doc: dict[str, Any] = {
            "autoCommit": True,
            "consumeResult": result,
            "order": self.orderly,
            "spentTimeMills": int((self.clock.monotonic() - begin) * 1000),
        }
        if remark is not None:
            doc["remark"] = remark
        return doc

    # -- sending failed messages back ----------------------------------------------------
    async def resend_to_retry(self, msg: MessageRecord, reconsume_times: int, max_reconsume_times: int) -> None:
        """Store a copy in ``%RETRY%group`` through the inner producer (Java's fallback when
        CONSUMER_SEND_MSG_BACK fails, and the orderly DLQ path). Raises on failure."""
        props = dict(msg.properties)
        for name in (P.DELAY, PROPERTY_TRANSACTION_PREPARED):
            props.pop(name, None)
        origin = props.get(P.ORIGIN_MESSAGE_ID, "").strip()
        props[P.ORIGIN_MESSAGE_ID] = origin or msg.msg_id
        props[P.RETRY_TOPIC] = msg.topic
        props[PROPERTY_RECONSUME_TIME] = str(reconsume_times)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
        copy = Message(
            retry_topic(self.group),
            msg.body,
            properties=props,
            delay_level=3 + msg.reconsume_times,
            flag=msg.flag,
        )
        producer = await self.inner_producer()
        await producer.send(copy)


def coerce_status(value: Any, kind: type[enum.Enum]) -> Any:
    """The listener's answer as the enum (its name as a string is accepted); None if neither."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind[value]
        except KeyError:
            pass
    if value is not None:
        limited.log(
            log,
            logging.WARNING,
            ("listener-answer", kind.__name__),
            "a listener answered %r, not a %s; taken as a failure",
            value,
            kind.__name__,
        )
    return None


_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


class ConsumeMessageConcurrentlyService(ConsumeMessageService):
    def __init__(
        self,
        state: PushState,
        parts: ConsumerParts,
        listener: Listener,
        inner_producer: Callable[[], Awaitable[InnerProducer]],
    ) -> None:
        super().__init__(state, parts, listener, inner_producer)
        self._clean_task: asyncio.Task[None] | None = None
        self.workers = ConsumeWorkers(self.max_workers, lambda request: self.guarded(request, "consuming"))

    def start(self) -> None:
        super().start()
        self._clean_task = asyncio.get_running_loop().create_task(self._clean_loop(), name=f"clean-{self.group}")
        self._tasks.add(self._clean_task)

    async def shutdown(self) -> None:
        self.stopped = True
        await self.workers.stop()
        await super().shutdown()

    async def _clean_loop(self) -> None:
        interval = self.settings.consume_timeout * 60
        while True:
            await asyncio.sleep(interval)
            try:
                await self.clean_expired_messages()
            except Exception:
                log.exception("group %s: cleaning expired messages failed", self.group)

    async def clean_expired_messages(self) -> None:
        """Messages stuck in a listener longer than ``consume_timeout`` minutes are sent back
        (delay level 3) and released, so the committed offset moves on."""
        now_ms = self.clock.wall_ms()
        for mq, pq in list(self.parts.rebalance.process_queue_table.items()):
            for _ in range(16):
                msg = pq.expired_head(self.settings.consume_timeout * 60, now_ms)
                if msg is None:
                    break
                if not await self.send_message_back(msg, 3, mq.broker_name):
                    break
                log.info("group %s: sent back expired message %s of %s", self.group, msg.msg_id, mq)
                if pq.first_offset() == msg.queue_offset:
                    pq.remove_message([msg])

    def submit(self, msgs: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        size = max(1, self.settings.consume_message_batch_max_size)
        if self.stopped:
            return
        for i in range(0, len(msgs), size):
            self.workers.submit(self.consume(msgs[i : i + size], pq, mq))

    async def consume(self, msgs: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            log.info("group %s: %s is dropped, %d messages not consumed", self.group, mq, len(msgs))
            return
        context = ConsumeConcurrentlyContext(mq)
        reset_retry_topic(msgs, self.group)
        start = str(self.clock.wall_ms())
        for msg in msgs:
            msg.properties[PROPERTY_CONSUME_START_TIME] = start
        status: ConsumeConcurrentlyStatus | None
        try:
            # a consume request runs on one of the pool's tasks: no slot to take
            status = coerce_status(await self.call_in_pool(list(msgs), context), ConsumeConcurrentlyStatus)
        except Exception:
            limited.log(
                log,
                logging.WARNING,
                ("listener", self.group),
                "group %s: the listener raised on %d messages of %s; they are consumed again later",
                self.group,
                len(msgs),
                mq,
                exc_info=True,
            )
            status = None
        if status is None:
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.debug("group %s: %s was dropped while consuming (rebalanced); result not processed", self.group, mq)
            return
        if status is _SUCCESS and context.ack_index >= len(msgs) - 1 and msgs:
            self._all_consumed(msgs, pq, mq)  # the usual answer: nothing to send back, no await
            return
        await self.process_consume_result(status, context, msgs, pq, mq)

    def _all_consumed(self, msgs: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue) -> None:
        """``process_consume_result`` for a batch the listener consumed in full (the path
        nearly every message takes): counted, released, the offset moved on."""
        self.state.stats.consumed(mq.topic, len(msgs), 0)
        self._release(msgs, pq, mq)

    def _release(self, done: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Forget ``done`` and move the queue's offset to what the cache now starts at."""
        offset = pq.remove_message(done)
        if offset >= 0 and not pq.dropped:
            self.parts.offset_store.update_offset(mq, offset, increase_only=True)

    async def process_consume_result(
        self,
        status: ConsumeConcurrentlyStatus,
        context: ConsumeConcurrentlyContext,
        msgs: list[MessageRecord],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if not msgs:
            return
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(context.ack_index, len(msgs) - 1)
            self.state.stats.consumed(mq.topic, ack_index + 1, len(msgs) - ack_index - 1)
        else:
            ack_index = -1
            self.state.stats.consumed(mq.topic, 0, len(msgs))
        failed = msgs[ack_index + 1 :]
        done = list(msgs)
        if self.settings.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                limited.log(
                    log,
                    logging.WARNING,
                    ("broadcast-dropped", self.group),
                    "group %s (broadcasting): message %s failed, dropped (broadcasting does not retry)",
                    self.group,
                    msg.msg_id,
                )
        else:
            back_failed: list[MessageRecord] = []
            for msg in failed:
                if not await self.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                    msg.reconsume_times += 1
                    back_failed.append(msg)
            if back_failed:
                ids = {id(m) for m in back_failed}
                done = [m for m in msgs if id(m) not in ids]
                self.later(
                    self.settings.local_reconsume_delay,
                    lambda: self.submit(back_failed, pq, mq, True),
                    f"re-consuming {len(back_failed)} messages of {mq}",
                )
        self._release(done, pq, mq)

    async def send_message_back(self, msg: MessageRecord, delay_level: int, broker_name: str) -> bool:
        """CONSUMER_SEND_MSG_BACK, else a copy to the retry topic; False if neither worked."""
        max_times = self.settings.effective_max_reconsume_times(orderly=False)
        if not msg.broker_name:
            msg.broker_name = broker_name
        try:
            await self.parts.pull_api.send_back(msg, self.group, delay_level, max_times, timeout=5.0)
            self._warn_if_dead_lettered(msg, max_times)
            return True
        except Exception as exc:
            log.info(
                "group %s: sending back %s failed (%s); re-sending to the retry topic", self.group, msg.msg_id, exc
            )
        try:
            await self.resend_to_retry(msg, msg.reconsume_times + 1, max_times)
            self._warn_if_dead_lettered(msg, max_times)
            return True
        except Exception as exc:
            limited.log(
                log,
                logging.WARNING,
                ("send-back", self.group),
                "group %s: re-sending %s to the retry topic failed (consumed again locally): %s",
                self.group,
                msg.msg_id,
                exc,
            )
            return False

    def _warn_if_dead_lettered(self, msg: MessageRecord, max_times: int) -> None:
        """The broker moves a message sent back after its last retry to the DLQ: the user
        must look there (``%DLQ%<group>``), so this is a warning, once a minute per group."""
        if msg.reconsume_times >= max_times:
            limited.log(
                log,
                logging.WARNING,
                ("dlq", self.group),
                "group %s: message %s failed %d times; it goes to the dead-letter queue %s",
                self.group,
                msg.msg_id,
                msg.reconsume_times + 1,
                dlq_topic(self.group),
            )

    async def consume_directly(self, msg: MessageRecord, broker_name: str) -> dict[str, Any]:
        context = ConsumeConcurrentlyContext(MessageQueue(msg.topic, broker_name, msg.queue_id))
        return await self._directly(
            msg, context, {ConsumeConcurrentlyStatus.CONSUME_SUCCESS}, {ConsumeConcurrentlyStatus.RECONSUME_LATER}
        )
