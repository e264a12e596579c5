"""What async sends need besides the send itself: the callbacks they report to and the
bookkeeping of the sends in flight (``AsyncSends``: admitted against the in-flight budget
of ``send_budget`` or queued for it, started at once, reported once, drained at shutdown).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.message import SendResult
from ledgermq.client.producer.fast_send import SendFuture, SendOp
from ledgermq.client.producer.outgoing import Outgoing
from ledgermq.client.producer.send_budget import AsyncBackPressureError, AsyncSendBudget
from ledgermq.clock import Clock
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)


class SendCallback(Protocol):
    """What ``send_async`` reports to; either method may be a coroutine function."""

    def on_success(self, result: SendResult) -> object: ...

    def on_exception(self, exc: Exception) -> object: ...


OnSuccess = Callable[[SendResult], object]
OnException = Callable[[Exception], object]


@dataclass(slots=True)
class Callbacks:
    """The two ways of being told of an async send's outcome, normalised (either may be None)."""

    on_success: OnSuccess | None
    on_exception: OnException | None

    @classmethod
    def of(
        cls, callback: SendCallback | None, on_success: OnSuccess | None, on_exception: OnException | None
    ) -> Callbacks | None:
        if callback is None and on_success is None and on_exception is None:
            return None  # the common future-only send, first
        if callback is not None:
            if on_success is not None or on_exception is not None:
                raise TypeError("give a callback object or on_success=/on_exception=, not both")
            if not callable(getattr(callback, "on_success", None)) or not callable(
                getattr(callback, "on_exception", None)
            ):
                raise TypeError(f"{callback!r} has no on_success and on_exception methods")
            return cls(callback.on_success, callback.on_exception)
        return cls(on_success, on_exception)

    def call_now(self, fn: Callable[[Any], object] | None, arg: object) -> Awaitable[object] | None:
        """Run one callback; what it returns when that is awaitable (an ``async def``
        callback's coroutine), else None. Its exceptions are logged, not raised."""
        if fn is None:
            return None
        try:
            outcome = fn(arg)
        except Exception:
            _log_callback_error(fn)
            return None
        return outcome if inspect.isawaitable(outcome) else None

    async def call(self, fn: Callable[[Any], object] | None, arg: object) -> None:
        """Run one callback (awaiting it if it is a coroutine); its exceptions are logged, not raised."""
        if fn is None:
            return
        try:
            outcome = fn(arg)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            _log_callback_error(fn)


def _log_callback_error(fn: Callable[[Any], object]) -> None:
    """The user's code raised: visible, but one record a minute per callback function."""
    limited.log(
        log,
        logging.ERROR,
        ("send-callback", getattr(fn, "__qualname__", type(fn).__qualname__)),
        "the send callback %r raised",
        fn,
        exc_info=True,
    )


# How an admitted async send is carried out: started on the op (the fast path, or a coroutine).
Launch = Callable[[SendOp], None]
# Makes the op of one async send: (prepared message, its future, start time, timeout) -> op.
MakeOp = Callable[[Outgoing, SendFuture, float, float], SendOp]


class AsyncSends:
    """The async sends of one producer: admitted against the budget (or queued for it),
    reported once to their callbacks, and drained (then failed) when the producer shuts
    down. The producer makes each send's op; this keeps what every kind of async send
    shares, so the four ``send_*_async`` methods stay one call each."""

    def __init__(self, budget: AsyncSendBudget, clock: Clock, check_running: Callable[[], None]) -> None:
        self.budget = budget
        self.clock = clock
        self.check_running = check_running
        self.live: set[SendOp] = set()  # admitted or queued, not yet reported
        self._idle: asyncio.Future[None] | None = None  # resolved when ``live`` empties during drain
        self._reporting: set[asyncio.Future[None]] = set()  # async callbacks still running
        # Bound once: a bound method made per send is one more object per send for the
        # collector to walk while thousands wait (the ops' and the budget's callbacks).
        self._grant: Callable[[SendOp], None] = self._admitted
        self._expire: Callable[[SendOp], None] = self._expired
        self._on_end: Callable[[SendOp, bool], None] = self._ended
        self._on_report: Callable[[SendOp, SendResult | None, BaseException | None], None] = self._report

    def start(
        self,
        prepare: Callable[[Any], Outgoing],
        subject: Any,
        make_op: MakeOp,
        launch: Launch,
        handler: Callbacks | None,
        timeout: float,
    ) -> SendFuture:
        """Prepare ``subject`` now (so later changes to the message do not leak into the send), take a
        budget slot if one is free and launch the send, else queue it for a slot. A producer
        not running or a bad message ends the future with that error (and reaches
        ``on_exception``, on a later step) instead of raising here."""
        loop = asyncio.get_running_loop()
        started = self.clock.monotonic()
        fut = SendFuture(loop=loop)
        fut.op = None
        try:
            self.check_running()
            out = prepare(subject)
        except MQClientError as exc:
            self._fail_early(fut, handler, exc)
            return fut
        op = fut.op = make_op(out, fut, started, timeout)
        op.on_end = self._on_end
        op.report = self._on_report
        op.handler = handler
        self.live.add(op)
        size = len(out.body)
        if self.budget.try_acquire(size):
            op.held = size
            launch(op)
        else:
            op.size, op.launch, op.grant, op.expire = size, launch, self._grant, self._expire
            self.budget.enqueue(op, timeout)
        return fut

    def _fail_early(self, fut: SendFuture, handler: Callbacks | None, exc: MQClientError) -> None:
        async def report() -> None:  # on a later step, as the task that carried it before did
            if handler is not None:
                await handler.call(handler.on_exception, exc)
            if not fut.done():
                fut.set_exception(exc)
                if handler is not None and handler.on_exception is not None:
                    _mark_retrieved(fut)  # the callback has seen the error

        self._track(asyncio.ensure_future(report()))

    def _track(self, task: asyncio.Future[None]) -> None:
        self._reporting.add(task)
        task.add_done_callback(self._reporting.discard)

    def _admitted(self, op: SendOp) -> None:
        op.held = op.size
        op.launch(op)

    def _expired(self, op: SendOp) -> None:
        budget = self.budget
        op.finish(
            None,
            AsyncBackPressureError(
                f"no async send slot within {op.timeout:.3f}s ({budget.count} sends, {budget.bytes} bytes in flight)"
            ),
        )

    def _ended(self, op: SendOp, aborted: bool) -> None:
        if op.held >= 0:
            size, op.held = op.held, -1
            self.budget.release(size)
        elif not op.withdrawn:
            self.budget.withdraw(op)
        if aborted:
            self._settled(op)

    def _report(self, op: SendOp, result: SendResult | None, exc: BaseException | None) -> None:
        """The callbacks, then the future: at once for plain callbacks, after an ``async
        def`` one has run."""
        handler: Callbacks | None = op.handler
        if handler is not None and not isinstance(exc, asyncio.CancelledError):
            fn = handler.on_success if exc is None else handler.on_exception
            pending = handler.call_now(fn, result if exc is None else exc)
            if pending is not None:
                self._track(asyncio.ensure_future(self._finish_after(pending, op, result, exc)))
                return
        op.complete(result, exc)
        if exc is not None and handler is not None and handler.on_exception is not None:
            _mark_retrieved(op.fut)  # the callback has seen the error
        self._settled(op)

    async def _finish_after(
        self, pending: Awaitable[object], op: SendOp, result: SendResult | None, exc: BaseException | None
    ) -> None:
        try:
            await pending
        except Exception:
            handler: Callbacks | None = op.handler
            if handler is not None:
                _log_callback_error(handler.on_success if exc is None else handler.on_exception)  # type: ignore[arg-type]
        finally:
            op.complete(result, exc)
            if exc is not None:
                _mark_retrieved(op.fut)  # the callback has seen the error
            self._settled(op)

    def _settled(self, op: SendOp) -> None:
        self.live.discard(op)
        if not self.live and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def drain(self, timeout: float) -> None:
        """Let the sends in flight finish for up to ``timeout`` seconds, then fail the rest
        with ClientStateError (their callbacks run). Called once, by the producer's shutdown."""
        if self.live:
            self._idle = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait((self._idle,), timeout=timeout)
            finally:
                self._idle = None
        left = list(self.live)
        for op in left:
            op.fail_now(ClientStateError("the producer shut down before the async send completed"))
        if left:
            await asyncio.wait([op.fut for op in left])
        if self._reporting:
            await asyncio.wait(set(self._reporting))


def _mark_retrieved(fut: asyncio.Future[SendResult]) -> None:
    """Retrieve a failed future's exception so asyncio does not log it as never retrieved."""
    if fut.done() and not fut.cancelled():
        fut.exception()
