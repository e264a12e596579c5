"""What async sends need besides the send itself: the callbacks they report to, the
in-flight budget that keeps a fast producing loop from queueing without bound, and the
bookkeeping of the sends in flight (``AsyncSends``: started at once, reported once,
drained at shutdown).

The budget (256 sends, 64 MiB of bodies) matches the broker's per-connection in-flight
limit, past which it answers SYSTEM_BUSY; later sends wait in order, and the wait counts
against their timeout. A send waiting for a slot is an entry in the budget's queue, not a
task: admitted, it starts from the step that freed the slot. The waits' deadlines share
one timer (armed at the earliest), so a loop that fires 30,000 ``send_async`` calls makes
no timer, future or task per waiting send.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.message import SendResult
from ledgermq.client.producer.fast_send import SendFuture, SendOp
from ledgermq.client.producer.outgoing import Outgoing
from ledgermq.clock import Clock
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)


class AsyncBackPressureError(MQClientError):
    """An async send waited its whole timeout for an in-flight slot (Java's RemotingTooMuchRequestException)."""


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
        if callback is not None:
            if on_success is not None or on_exception is not None:
                raise TypeError("give a callback object or on_success=/on_exception=, not both")
            if not callable(getattr(callback, "on_success", None)) or not callable(
                getattr(callback, "on_exception", None)
            ):
                raise TypeError(f"{callback!r} has no on_success and on_exception methods")
            return cls(callback.on_success, callback.on_exception)
        if on_success is None and on_exception is None:
            return None
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


class _Queued:
    """A send waiting in the budget's queue for a slot: started when admitted, failed with
    AsyncBackPressureError when its deadline passes first."""

    __slots__ = ("deadline", "expire", "grant", "size", "withdrawn")

    def __init__(self, size: int, grant: Callable[[], None], expire: Callable[[], None], deadline: float) -> None:
        self.size, self.grant, self.expire, self.deadline = size, grant, expire, deadline
        self.withdrawn = False


_Waiter = tuple[int, asyncio.Future[None]] | _Queued


class AsyncSendBudget:
    """In-flight async sends, bounded by count and body bytes; waiters are served in order.

    A send larger than the whole byte budget still goes out when nothing else is in flight.
    Waiters are futures (``acquire``, ``wait_for_room``) or queued sends (``enqueue``).
    """

    def __init__(self, max_count: int, max_bytes: int) -> None:
        if max_count < 1 or max_bytes < 1:
            raise MQClientError("the async send budget needs at least one send and one byte")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._waiters: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def _fits(self, size: int) -> bool:
        return self.count < self.max_count and (self.count == 0 or self.bytes + size <= self.max_bytes)

    @property
    def has_room(self) -> bool:
        """Would a small send be admitted at once?"""
        return not self._waiters and self._fits(0)

    def try_acquire(self, size: int) -> bool:
        if self._waiters or not self._fits(size):
            return False
        self.count += 1
        self.bytes += size
        return True

    def enqueue(self, size: int, grant: Callable[[], None], expire: Callable[[], None], timeout: float) -> _Queued:
        """Queue a send for a slot: ``grant`` runs when it is admitted (the slot taken),
        ``expire`` when ``timeout`` passes first. ``withdraw`` it if it ends otherwise."""
        loop = asyncio.get_running_loop()
        entry = _Queued(size, grant, expire, loop.time() + max(timeout, 0.0))
        self._waiters.append(entry)
        if self._timer is None or entry.deadline < self._timer_at:
            self._arm(loop, entry.deadline)
        return entry

    def withdraw(self, entry: _Queued) -> None:
        """A queued send that ended before its turn (cancelled, shut down)."""
        entry.withdrawn = True
        self._wake()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._sweep)
        self._timer_at = when

    def _sweep(self) -> None:
        """The one deadline timer: fail the queued sends whose wait is over, arm again at
        the earliest deadline left (no timer while nothing waits)."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + 0.001  # the timer's millisecond resolution, as the connection's
        expired = [w for w in self._waiters if isinstance(w, _Queued) and not w.withdrawn and w.deadline <= now]
        for entry in expired:
            entry.withdrawn = True
            entry.expire()
        left = [w.deadline for w in self._waiters if isinstance(w, _Queued) and not w.withdrawn]
        if left:
            self._arm(loop, min(left))
        if expired:
            self._wake()

    async def acquire(self, size: int, timeout: float) -> None:
        """Wait (in order) for a slot; AsyncBackPressureError when ``timeout`` passes first."""
        if self.try_acquire(size):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            await asyncio.wait((fut,), timeout=max(timeout, 0.0))
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(size)  # granted while we were being cancelled
            else:
                self._drop(entry)
            raise
        if not fut.done():
            self._drop(entry)
            raise AsyncBackPressureError(
                f"no async send slot within {timeout:.3f}s ({self.count} sends, {self.bytes} bytes in flight)"
            )

    def _drop(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        try:
            self._waiters.remove(entry)
        except ValueError:
            pass
        entry[1].cancel()
        self._wake()

    def release(self, size: int) -> None:
        self.count -= 1
        self.bytes -= size
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if isinstance(head, _Queued):
                if head.withdrawn:
                    waiters.popleft()
                    continue
                size = head.size
            else:
                size = head[0]
                if head[1].done():
                    waiters.popleft()
                    continue
            if not self._fits(size):
                return
            waiters.popleft()
            self.count += 1
            self.bytes += size
            if isinstance(head, _Queued):
                head.withdrawn = True
                head.grant()
            else:
                head[1].set_result(None)

    async def wait_for_room(self, timeout: float | None) -> bool:
        """Until this caller's turn comes with a slot free (True), or False after ``timeout``.

        Reserves nothing: the slot is handed on at once, so a send started right after
        (in the same step of the loop) is admitted unless someone queued meanwhile."""
        if self.has_room:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (0, fut)
        self._waiters.append(entry)
        try:
            if timeout is None:
                await fut  # no timer to arm: the common back-pressure loop waits this way
            else:
                await asyncio.wait((fut,), timeout=max(timeout, 0.0))
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(0)
            else:
                self._drop(entry)
            raise
        if not fut.done():
            self._drop(entry)
            return False
        self.release(0)
        return True


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
        self._queued: dict[SendOp, _Queued] = {}
        self._idle: asyncio.Future[None] | None = None  # resolved when ``live`` empties during drain
        self._reporting: set[asyncio.Future[None]] = set()  # async callbacks still running

    def start(
        self,
        prepare: Callable[[], Outgoing],
        make_op: MakeOp,
        launch: Launch,
        handler: Callbacks | None,
        timeout: float,
    ) -> SendFuture:
        """Prepare now (so later changes to the message do not leak into the send), take a
        budget slot if one is free and launch the send, else queue it for a slot. A producer
        not running or a bad message ends the future with that error (and reaches
        ``on_exception``, on a later step) instead of raising here."""
        loop = asyncio.get_running_loop()
        started = self.clock.monotonic()
        fut = SendFuture(loop=loop)
        fut.op = None
        try:
            self.check_running()
            out = prepare()
        except MQClientError as exc:
            self._fail_early(fut, handler, exc)
            return fut
        op = fut.op = make_op(out, fut, started, timeout)
        op.on_end = self._ended
        op.report = self._report
        op.handler = handler
        self.live.add(op)
        size = len(out.body)
        if self.budget.try_acquire(size):
            op.held = size
            launch(op)
        else:
            self._queued[op] = self.budget.enqueue(
                size, lambda: self._admitted(op, size, launch), lambda: self._expired(op, timeout), timeout
            )
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

    def _admitted(self, op: SendOp, size: int, launch: Launch) -> None:
        self._queued.pop(op, None)
        op.held = size
        launch(op)

    def _expired(self, op: SendOp, timeout: float) -> None:
        self._queued.pop(op, None)
        budget = self.budget
        op.finish(
            None,
            AsyncBackPressureError(
                f"no async send slot within {timeout:.3f}s ({budget.count} sends, {budget.bytes} bytes in flight)"
            ),
        )

    def _ended(self, op: SendOp, aborted: bool) -> None:
        if op.held >= 0:
            size, op.held = op.held, -1
            self.budget.release(size)
        else:
            entry = self._queued.pop(op, None)
            if entry is not None:
                self.budget.withdraw(entry)
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
