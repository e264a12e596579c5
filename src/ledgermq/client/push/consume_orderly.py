"""Orderly consumption (RocketMQ 4.9.7 ``ConsumeMessageOrderlyService``): one consumer run
per queue at a time, batches taken in offset order, and (for clustering) only while this
client holds the queue's broker lock. A batch answered SUSPEND_CURRENT_QUEUE_A_MOMENT is
consumed again after the suspend time; past ``max_reconsume_times`` it is sent to the
retry topic with the reconsume count, which the broker turns into a DLQ write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ledgermq.client.consumer.common import MessageModel
from ledgermq.client.consumer.parts import ConsumerParts
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.push.consume_service import (
    MAX_TIME_CONSUME_CONTINUOUSLY,
    PROPERTY_RECONSUME_TIME,
    ConsumeMessageService,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    Listener,
    coerce_status,
    reset_retry_topic,
)
from ledgermq.client.push.inner_producer import InnerProducer
from ledgermq.client.push.state import PushState
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)


class ConsumeMessageOrderlyService(ConsumeMessageService):
    orderly = True

    def __init__(
        self,
        state: PushState,
        parts: ConsumerParts,
        listener: Listener,
        inner_producer: Callable[[], Awaitable[InnerProducer]],
    ) -> None:
        super().__init__(state, parts, listener, inner_producer)
        self._queue_locks: dict[MessageQueue, asyncio.Lock] = {}

    @property
    def clustering(self) -> bool:
        return self.settings.message_model is MessageModel.CLUSTERING

    def start(self) -> None:
        super().start()
        if self.clustering:
            task = asyncio.get_running_loop().create_task(self._lock_loop(), name=f"lock-{self.group}")
            self._tasks.add(task)

    async def _lock_loop(self) -> None:
        await asyncio.sleep(min(1.0, self.settings.lock_interval))
        while True:
            try:
                if not self.stopped:
                    await self.parts.rebalance.lock_all()
            except Exception:
                limited.log(
                    log,
                    logging.ERROR,
                    ("lock-all", self.group),
                    "group %s: renewing the queue locks failed",
                    self.group,
                    exc_info=True,
                )
            await asyncio.sleep(self.settings.lock_interval)

    async def shutdown(self) -> None:
        await super().shutdown()
        if self.clustering:
            await self.parts.rebalance.unlock_all(oneway=False)

    def submit(self, msgs: list[MessageRecord], pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        if dispatch:
            self.spawn(self.consume(pq, mq), f"consuming {mq} orderly")

    def submit_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_ms: int) -> None:
        if suspend_ms == -1:
            suspend_ms = self.settings.suspend_current_queue_time_millis
        delay = min(max(suspend_ms, 10), 30_000) / 1000
        self.later(delay, lambda: self.submit([], pq, mq, True), f"re-consuming {mq} orderly")

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay: float) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            ok = not self.stopped and await self.parts.rebalance.lock(mq)
            self.submit_later(pq, mq, 10 if ok else 3000)

        self.spawn(run(), f"re-locking {mq}")

    async def consume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        lock = self._queue_locks.setdefault(mq, asyncio.Lock())
        async with lock:
            if not (not self.clustering or (pq.locked and not pq.lock_expired)):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, 0.1)
                return
            begin = self.clock.monotonic()
            go_on = True
            while go_on:
                if pq.dropped:
                    break
                if self.clustering and (not pq.locked or pq.lock_expired):
                    log.debug("group %s: %s is not locked (or the lock expired); consuming later", self.group, mq)
                    self.try_lock_later_and_reconsume(mq, pq, 0.01)
                    break
                if self.clock.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY:
                    self.submit_later(pq, mq, 10)
                    break
                msgs = pq.take_messages(max(1, self.settings.consume_message_batch_max_size))
                if not msgs:
                    break
                reset_retry_topic(msgs, self.group)
                context = ConsumeOrderlyContext(mq)
                status: ConsumeOrderlyStatus | None = None
                async with pq.consume_lock:
                    if pq.dropped:
                        break
                    try:
                        status = coerce_status(await self.call_listener(list(msgs), context), ConsumeOrderlyStatus)
                    except Exception:
                        limited.log(
                            log,
                            logging.WARNING,
                            ("listener", self.group),
                            "group %s: the orderly listener raised on %s; the queue is suspended a moment",
                            self.group,
                            mq,
                            exc_info=True,
                        )
                if status is None:
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is not ConsumeOrderlyStatus.SUCCESS and status is not ConsumeOrderlyStatus.COMMIT:
                    log.debug("group %s: orderly consumption of %s answered %s", self.group, mq, status.value)
                go_on = await self.process_consume_result(msgs, status, context, pq, mq)

    async def process_consume_result(
        self,
        msgs: list[MessageRecord],
        status: ConsumeOrderlyStatus,
        context: ConsumeOrderlyContext,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        go_on = True
        commit_offset = -1
        suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if context.auto_commit:
            if status is suspend:
                self.state.stats.consumed(mq.topic, 0, len(msgs))
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_later(pq, mq, context.suspend_current_queue_time_millis)
                    go_on = False
                else:
                    commit_offset = pq.commit()
            else:  # SUCCESS (COMMIT and ROLLBACK make no sense with auto commit: taken as SUCCESS)
                commit_offset = pq.commit()
                self.state.stats.consumed(mq.topic, len(msgs), 0)
        else:
            if status is ConsumeOrderlyStatus.SUCCESS:
                self.state.stats.consumed(mq.topic, len(msgs), 0)
            elif status is ConsumeOrderlyStatus.COMMIT:
                commit_offset = pq.commit()
            elif status is ConsumeOrderlyStatus.ROLLBACK:
                pq.rollback()
                self.submit_later(pq, mq, context.suspend_current_queue_time_millis)
                go_on = False
            else:
                self.state.stats.consumed(mq.topic, 0, len(msgs))
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_later(pq, mq, context.suspend_current_queue_time_millis)
                    go_on = False
        if commit_offset >= 0 and not pq.dropped:
            self.parts.offset_store.update_offset(mq, commit_offset, increase_only=False)
        return go_on

    async def check_reconsume_times(self, msgs: list[MessageRecord]) -> bool:
        """True when the batch must be consumed again; messages past the limit are sent to
        the retry topic (and so to the DLQ) instead."""
        max_times = self.settings.effective_max_reconsume_times(orderly=True)
        suspend = False
        for msg in msgs:
            if msg.reconsume_times >= max_times:
                msg.properties[PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times)
                try:
                    await self.resend_to_retry(msg, msg.reconsume_times, max_times)
                    limited.log(
                        log,
                        logging.WARNING,
                        ("dlq", self.group),
                        "group %s: %s reached %d reconsume times; it goes to the dead-letter queue",
                        self.group,
                        msg.msg_id,
                        msg.reconsume_times,
                    )
                except Exception as exc:
                    limited.log(
                        log,
                        logging.WARNING,
                        ("send-back", self.group),
                        "group %s: sending %s back failed (the queue is suspended a moment): %s",
                        self.group,
                        msg.msg_id,
                        exc,
                    )
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend

    async def consume_directly(self, msg: MessageRecord, broker_name: str) -> dict[str, Any]:
        context = ConsumeOrderlyContext(MessageQueue(msg.topic, broker_name, msg.queue_id))
        return await self._directly(
            msg,
            context,
            {ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT},
            {ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT},
        )
