"""``SyncProducer``: the blocking facade of ``Producer``. Callbacks given to
``send_async`` are plain functions run on the facade's small callback thread pool
(``ledgermq-sync-callback``), never on the loop thread, so they may call blocking facade
methods themselves."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import Callbacks, SendCallback
from ledgermq.client.producer.producer import Producer
from ledgermq.client.sync.loop_thread import Lifecycle, blocking

__all__ = ["SyncProducer"]


class SyncProducer(Lifecycle[Producer]):
    """``with SyncProducer("pg", "127.0.0.1:9876") as p: p.send(Message("T", b"hi"))``.

    Options are ``Producer``'s (``send_timeout``, ``retry_times``, ...)."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: Producer(group, namesrv_addrs, **options))

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

        Callbacks run on the facade's callback threads. While the producer's in-flight
        budget is full this call blocks (back-pressure, as Java's semaphore does), for at
        most the send timeout, which the wait counts against."""
        callbacks = Callbacks.of(callback, on_success, on_exception)  # the async producer's own checks
        if callbacks is not None:
            on_success, on_exception = callbacks.on_success, callbacks.on_exception
        producer = self._target
        pool = self._loop.callbacks
        limit = producer.send_timeout if timeout is None else timeout

        def in_pool(fn: Callable[[Any], object] | None) -> Callable[[Any], Awaitable[None]] | None:
            if fn is None:
                return None

            async def call(arg: Any) -> None:
                await asyncio.get_running_loop().run_in_executor(pool, fn, arg)

            return call

        outer: concurrent.futures.Future[SendResult] = concurrent.futures.Future()

        def copy(f: asyncio.Future[SendResult]) -> None:
            if f.cancelled():
                outer.cancel()
            elif (exc := f.exception()) is not None:
                if not outer.cancelled():
                    outer.set_exception(exc)
            elif not outer.cancelled():
                outer.set_result(f.result())

        async def admit_and_start() -> None:
            loop = asyncio.get_running_loop()
            begin = producer.clock.monotonic()
            await producer.wait_for_async_capacity(limit)
            inner = producer.send_async(
                msg,
                on_success=in_pool(on_success),
                on_exception=in_pool(on_exception),
                timeout=max(limit - (producer.clock.monotonic() - begin), 0.0),
            )
            inner.add_done_callback(copy)

            def cancel_inner(f: concurrent.futures.Future[SendResult]) -> None:
                if f.cancelled() and not loop.is_closed():
                    loop.call_soon_threadsafe(inner.cancel)

            outer.add_done_callback(cancel_inner)

        self._run(admit_and_start())
        return outer
