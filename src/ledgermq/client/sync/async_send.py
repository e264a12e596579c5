"""The blocking facade's async sends (``SyncProducer.send_async``): admitted on the calling
thread, started on the loop thread in call order, reported on the callback threads.

The contract is the one the facade always had: the call blocks only while the in-flight
budget is full (for at most the send timeout, which the wait counts against; then the
send fails with ``AsyncBackPressureError``); callbacks are plain functions run on the
facade's callback threads, never on the loop thread, and the returned future completes
after the callback has run; ``shutdown`` lets the sends in flight finish and waits for
their callbacks. What changed is the cost (``async_handoff``): the call no longer waits
for the loop thread, so the message is copied as it is at the call, and the send is
prepared later on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import threading
from typing import TYPE_CHECKING

from ledgermq.client.errors import ClientStateError
from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import Callbacks
from ledgermq.client.producer.send_budget import AsyncBackPressureError
from ledgermq.client.sync.async_handoff import Admission, LoopHandoff, Outstanding, ThreadAdmission
from ledgermq.client.sync.loop_thread import LoopThread, on_callback_thread

if TYPE_CHECKING:
    from ledgermq.client.producer.producer import Producer

__all__ = ["FacadeAsyncSends", "refuse_async_callbacks"]

log = logging.getLogger(__name__)

_reporting = threading.local()  # ``owner``: the Outstanding whose callback this thread runs


class FacadeAsyncSends:
    """One facade producer's async sends."""

    def __init__(self, producer: Producer, lt: LoopThread) -> None:
        self.producer = producer
        self.lt = lt
        budget = producer.async_budget
        self.admission = ThreadAdmission(budget.max_count, budget.max_bytes, producer.clock)
        self.handoff = LoopHandoff(lt.loop)
        self.outstanding = Outstanding()

    def start(self, msg: Message, callbacks: Callbacks | None, limit: float) -> concurrent.futures.Future[SendResult]:
        """Admit (blocking while the budget is full), queue the start, return the future."""
        producer = self.producer
        msg = _snapshot(msg)
        body = msg.body
        # a body of the wrong type is the producer's to refuse, through the future
        size = len(body) if isinstance(body, bytes) else 0
        outer: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        deadline = producer.clock.monotonic() + limit
        verdict = self.admission.acquire(size, limit)
        if verdict == Admission.CLOSED:
            raise ClientStateError("the producer is shut down")
        self.outstanding.track(outer)
        if verdict == Admission.TIMED_OUT:
            admission = self.admission
            exc = AsyncBackPressureError(
                f"no async send slot within {limit:.3f}s ({admission.count} sends, {admission.bytes} bytes in flight)"
            )
            self._report_from(callbacks, outer, None, exc, on_caller=True)
            return outer
        admission = self.admission

        def finished(inner: asyncio.Future[SendResult]) -> None:  # on the loop thread
            admission.release(size)
            if inner.cancelled():
                outer.cancel()
                return
            exc = inner.exception()
            self._report_from(callbacks, outer, None if exc is not None else inner.result(), exc, on_caller=False)

        def start() -> None:  # on the loop thread, in the order of the calls
            if outer.cancelled():
                admission.release(size)
                return
            remaining = max(deadline - producer.clock.monotonic(), 0.0)  # the queue's wait counts too
            try:
                inner = producer.send_async(msg, timeout=remaining)
            except Exception as exc:  # not expected: the producer reports through the future
                admission.release(size)
                self._report_from(callbacks, outer, None, exc, on_caller=False)
                return
            inner.add_done_callback(finished)
            loop = asyncio.get_running_loop()

            def cancel_inner(f: concurrent.futures.Future[SendResult]) -> None:
                if f.cancelled() and not loop.is_closed():
                    loop.call_soon_threadsafe(inner.cancel)

            outer.add_done_callback(cancel_inner)

        try:
            self.handoff.submit(start)
        except RuntimeError:  # the loop is closed
            admission.release(size)
            outer.cancel()
            raise ClientStateError("the producer is shut down") from None
        return outer

    def _report_from(
        self,
        callbacks: Callbacks | None,
        outer: concurrent.futures.Future[SendResult],
        result: SendResult | None,
        exc: BaseException | None,
        *,
        on_caller: bool,
    ) -> None:
        """Complete ``outer``, after its callback when it has one. A callback runs on a
        callback thread: this one when the caller is one already (so callbacks that
        send from a full budget cannot all wait on their own queued reports), else
        the pool."""
        if callbacks is None:
            _complete(outer, result, exc)
        elif on_caller and on_callback_thread():
            self._report(callbacks, outer, result, exc)
        else:
            try:
                self.lt.callbacks.submit(self._report, callbacks, outer, result, exc)
            except RuntimeError:  # the pool is shut down: no thread left to run the callback
                log.warning("async send ended after the callback threads stopped; its callback is not run")
                _complete(outer, result, exc)

    def _report(
        self,
        callbacks: Callbacks,
        outer: concurrent.futures.Future[SendResult],
        result: SendResult | None,
        exc: BaseException | None,
    ) -> None:
        """On a callback thread: the user's callback (its exceptions logged), then the future."""
        if isinstance(exc, Exception | None):
            fn = callbacks.on_success if exc is None else callbacks.on_exception
            before = getattr(_reporting, "owner", None)
            _reporting.owner = self.outstanding
            try:
                callbacks.call_now(fn, result if exc is None else exc)
            finally:
                _reporting.owner = before
        _complete(outer, result, exc)

    def close(self) -> None:
        """Refuse later sends and wake the callers waiting for a slot (they get ClientStateError)."""
        self.admission.close()

    def wait_for_callbacks(self) -> None:
        """Until every returned future has completed (its callback run), except the one
        whose callback is calling this."""
        own = 1 if getattr(_reporting, "owner", None) is self.outstanding else 0
        self.outstanding.wait_until(own)


def refuse_async_callbacks(callbacks: Callbacks | None) -> None:
    """The facade runs callbacks on plain threads, where nothing would await a coroutine:
    an ``async def`` callback is refused at the call rather than dropped unrun."""
    if callbacks is None:
        return
    for fn in (callbacks.on_success, callbacks.on_exception):
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"{fn!r} is a coroutine function: the blocking facade runs plain callbacks on its callback "
                "threads (an async def callback belongs to the asyncio Producer)"
            )


def _snapshot(msg: Message) -> Message:
    """The message as it is now: the send is prepared later, on the loop thread, and the
    caller may change or reuse its object (or its body's buffer) once ``send_async`` returns."""
    body = msg.body
    copy = dataclasses.replace(
        msg,
        properties=dict(msg.properties),
        body=bytes(body) if isinstance(body, bytearray | memoryview) else body,
    )
    if not isinstance(copy.keys, str | None):
        copy.keys = tuple(copy.keys)
    return copy


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
