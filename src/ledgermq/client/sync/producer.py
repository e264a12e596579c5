"""``SyncProducer``: the blocking facade of ``Producer``. Callbacks given to
``send_async`` are plain functions run on the facade's small callback thread pool
(``ledgermq-sync-callback``), never on the loop thread, so they may call blocking facade
methods themselves."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from ledgermq.client.errors import ClientStateError
from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import Callbacks, SendCallback
from ledgermq.client.producer.producer import Producer
from ledgermq.client.sync.async_send import FacadeAsyncSends, refuse_async_callbacks
from ledgermq.client.sync.loop_thread import Lifecycle, blocking

__all__ = ["SyncProducer"]


class SyncProducer(Lifecycle[Producer]):
    """``with SyncProducer("pg", "127.0.0.1:9876") as p: p.send(Message("T", b"hi"))``.

    Options are ``Producer``'s (``send_timeout``, ``retry_times``, ...)."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: Producer(group, namesrv_addrs, **options))
        self._async_sends = FacadeAsyncSends(self._target, self._loop)

    @property
    def producer(self) -> Producer:
        """The asyncio producer underneath (use it only on the facade's loop)."""
        return self._target

    send = blocking(Producer.send)
    send_oneway = blocking(Producer.send_oneway)
    send_batch = blocking(Producer.send_batch)
    send_to_queue = blocking(Producer.send_to_queue)
    send_orderly = blocking(Producer.send_orderly)
    fetch_publish_queues = blocking(Producer.fetch_publish_queues)

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        on_success: Callable[[SendResult], object] | None = None,
        on_exception: Callable[[Exception], object] | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """Start an async send; the returned future completes after the callback has run.

        Callbacks are plain functions (an ``async def`` one is refused with TypeError) run
        on the facade's callback threads. While the producer's in-flight budget is full
        this call blocks (back-pressure, as Java's semaphore does), for at most the send
        timeout, which the wait counts against; a wait that runs out fails the send with
        ``AsyncBackPressureError``. Otherwise the call returns at once: the message is
        copied as it is now and the send started on the loop thread, in the order of the
        calls (``client/sync/async_send.py``)."""
        callbacks = Callbacks.of(callback, on_success, on_exception)  # the async producer's own checks
        refuse_async_callbacks(callbacks)
        if self._closed:
            raise ClientStateError(f"this {type(self).__name__} is shut down")
        if self._loop.in_loop_thread:
            raise RuntimeError("a blocking ledgermq call on the facade's own event-loop thread would deadlock")
        limit = self._target.send_timeout if timeout is None else timeout
        return self._async_sends.start(msg, callbacks, limit)

    def shutdown(self) -> None:
        """Shut the producer down: later sends are refused, the async sends in flight
        finish and their callbacks run first; the last facade object to close stops the
        loop thread. Idempotent."""
        self._async_sends.close()
        self._close(self._target.shutdown(), then=self._async_sends.wait_for_callbacks)
