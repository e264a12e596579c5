"""``SyncLitePullConsumer`` and ``SyncPushConsumer``: the blocking facades of the two
consumers. A push consumer's plain listener runs on the consumer's own worker pool (its
``consume_thread_max`` threads), and queue-change listeners of the lite pull consumer on
the facade's callback threads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ledgermq.client.consumer.common import MessageSelector
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.client.push.consume_service import Listener
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.client.sync.loop_thread import Lifecycle, blocking, on_loop
from ledgermq.protocol.admin_body import MessageQueue

__all__ = ["SyncLitePullConsumer", "SyncPushConsumer"]


class SyncLitePullConsumer(Lifecycle[LitePullConsumer]):
    """``with SyncLitePullConsumer("cg", "127.0.0.1:9876") as c: ...`` after ``c.subscribe("T")``
    (or ``assign``) and ``start``; then ``c.poll(1.0)``. Options are ``LitePullConsumer``'s."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: LitePullConsumer(group, namesrv_addrs, **options))

    @property
    def consumer(self) -> LitePullConsumer:
        """The asyncio consumer underneath (use it only on the facade's loop)."""
        return self._target

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        listener: Callable[[str, set[MessageQueue], set[MessageQueue]], object] | None = None,
        *,
        expression_type: str = "TAG",
    ) -> None:
        """``LitePullConsumer.subscribe``; ``listener(topic, mq_all, mq_divided)`` runs on the
        facade's callback threads."""
        wrapped = None if listener is None else self._loop.in_pool(listener)
        self._call(lambda: self._target.subscribe(topic, expression, wrapped, expression_type=expression_type))

    def register_topic_message_queue_change_listener(
        self, topic: str, listener: Callable[[str, set[MessageQueue]], object]
    ) -> None:
        """``listener(topic, queues)`` on the facade's callback threads when the topic's queues change."""
        wrapped = self._loop.in_pool(listener)
        self._call(lambda: self._target.register_topic_message_queue_change_listener(topic, wrapped))

    unsubscribe = on_loop(LitePullConsumer.unsubscribe)
    assign = on_loop(LitePullConsumer.assign)
    set_sub_expression_for_assign = on_loop(LitePullConsumer.set_sub_expression_for_assign)
    assignment = on_loop(LitePullConsumer.assignment)
    pause = on_loop(LitePullConsumer.pause)
    resume = on_loop(LitePullConsumer.resume)
    commit_sync = on_loop(LitePullConsumer.commit_sync)
    poll = blocking(LitePullConsumer.poll)
    seek = blocking(LitePullConsumer.seek)
    seek_to_begin = blocking(LitePullConsumer.seek_to_begin)
    seek_to_end = blocking(LitePullConsumer.seek_to_end)
    fetch_message_queues = blocking(LitePullConsumer.fetch_message_queues)
    offset_for_timestamp = blocking(LitePullConsumer.offset_for_timestamp)
    committed = blocking(LitePullConsumer.committed)
    commit = blocking(LitePullConsumer.commit)


class SyncPushConsumer(Lifecycle[PushConsumer]):
    """``c = SyncPushConsumer("cg", "127.0.0.1:9876"); c.subscribe("T"); c.register_listener(fn);
    c.start()``. A plain listener ``fn(msgs, context) -> ConsumeConcurrentlyStatus`` runs on the
    consumer's worker pool. Options are ``PushConsumer``'s."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: PushConsumer(group, namesrv_addrs, **options))

    @property
    def consumer(self) -> PushConsumer:
        """The asyncio consumer underneath (use it only on the facade's loop)."""
        return self._target

    def register_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeConcurrentlyStatus``, run on the consumer's worker pool."""
        self._call(lambda: self._target.register_listener(fn))

    def register_orderly_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeOrderlyStatus``, one queue's batches in offset order."""
        self._call(lambda: self._target.register_orderly_listener(fn))

    subscribe = on_loop(PushConsumer.subscribe)
    unsubscribe = on_loop(PushConsumer.unsubscribe)
    suspend = on_loop(PushConsumer.suspend)
    resume = on_loop(PushConsumer.resume)
