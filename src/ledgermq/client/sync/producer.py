"""``SyncProducer``: the blocking facade of ``Producer``. Callbacks given to
``send_async`` are plain functions run on the facade's small callback thread pool
(``ledgermq-sync-callback``), never on the loop thread, so they may call blocking facade
methods themselves."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ledgermq.client.errors import ClientStateError
from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import Callbacks, SendCallback
from ledgermq.client.producer.producer import Producer
from ledgermq.client.producer.send_budget import AsyncBackPressureError
from ledgermq.client.sync.async_handoff import LoopHandoff, ThreadAdmission
from ledgermq.client.sync.loop_thread import Lifecycle, blocking

__all__ = ["SyncProducer"]


class SyncProducer(Lifecycle[Producer]):
    """``with SyncProducer("pg", "127.0.0.1:9876") as p: p.send(Message("T", b"hi"))``.

    Options are ``Producer``'s (``send_timeout``, ``retry_times``, ...)."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: Producer(group, namesrv_addrs, **options))
        budget = self._target.async_budget
        self._admission = ThreadAdmission(budget.max_count, budget.max_bytes, self._target.clock)
        self._handoff = LoopHandoff(self._loop.loop)

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
        most the send timeout, which the wait counts against; a wait that runs out fails
        the send with ``AsyncBackPressureError``. Otherwise the call returns at once: the
        send is started on the loop thread (``async_handoff``), in the order of the calls."""
        callbacks = Callbacks.of(callback, on_success, on_exception)  # the async producer's own checks
        if self._closed:
            raise ClientStateError(f"this {type(self).__name__} is shut down")
        lt = self._loop
        if lt.in_loop_thread:
            raise RuntimeError("a blocking ledgermq call on the facade's own event-loop thread would deadlock")
        producer = self._target
        limit = producer.send_timeout if timeout is None else timeout
        msg = _snapshot(msg)
        size = len(msg.body)
        outer: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        begin = producer.clock.monotonic()
        if not self._admission.acquire(size, limit):
            budget = self._admission
            exc = AsyncBackPressureError(
                f"no async send slot within {limit:.3f}s ({budget.count} sends, {budget.bytes} bytes in flight)"
            )
            lt.callbacks.submit(_report, callbacks, outer, None, exc)
            return outer
        remaining = max(limit - (producer.clock.monotonic() - begin), 0.0)
        admission = self._admission

        def finished(inner: asyncio.Future[SendResult]) -> None:  # on the loop thread
            admission.release(size)
            if inner.cancelled():
                outer.cancel()
                return
            exc = inner.exception()
            result = None if exc is not None else inner.result()
            if callbacks is None:
                _complete(outer, result, exc)
            else:
                lt.callbacks.submit(_report, callbacks, outer, result, exc)

        def start() -> None:  # on the loop thread, in the order of the calls
            if outer.cancelled():
                admission.release(size)
                return
            try:
                inner = producer.send_async(msg, timeout=remaining)
            except BaseException as exc:  # not expected (the producer reports through the future)
                admission.release(size)
                lt.callbacks.submit(_report, callbacks, outer, None, exc)
                raise
            inner.add_done_callback(finished)
            loop = asyncio.get_running_loop()

            def cancel_inner(f: concurrent.futures.Future[SendResult]) -> None:
                if f.cancelled() and not loop.is_closed():
                    loop.call_soon_threadsafe(inner.cancel)

            outer.add_done_callback(cancel_inner)

        try:
            self._handoff.submit(start)
        except RuntimeError:  # the loop is closed
            admission.release(size)
            raise ClientStateError(f"this {type(self).__name__} is shut down") from None
        return outer


def _snapshot(msg: Message) -> Message:
    """The message as it is now: the send is prepared later, on the loop thread, and the
    caller may change or reuse its object as soon as ``send_async`` returns."""
    copy = dataclasses.replace(msg, properties=dict(msg.properties))
    if not isinstance(copy.keys, str | None):
        copy.keys = tuple(copy.keys)
    return copy


def _report(
    callbacks: Callbacks | None,
    outer: concurrent.futures.Future[SendResult],
    result: SendResult | None,
    exc: BaseException | None,
) -> None:
    """On a callback thread: the user's callback (its exceptions logged), then the future."""
    if callbacks is not None and isinstance(exc, Exception | None):
        fn = callbacks.on_success if exc is None else callbacks.on_exception
        callbacks.call_now(fn, result if exc is None else exc)
    _complete(outer, result, exc)


def _complete(
    outer: concurrent.futures.Future[SendResult], result: SendResult | None, exc: BaseException | None
) -> None:
    try:
        if exc is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(result)  # type: ignore[arg-type]
    except concurrent.futures.InvalidStateError:
        pass  # cancelled by the caller meanwhile
