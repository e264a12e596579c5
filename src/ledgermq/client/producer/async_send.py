"""What async sends need besides the send itself: the callbacks they report to, the
in-flight budget that keeps a fast producing loop from queueing without bound, and the
tasks that carry them (``AsyncSends``: started at once, reported once, drained at shutdown).

The budget (256 sends, 64 MiB of bodies) matches the broker's per-connection in-flight
limit, past which it answers SYSTEM_BUSY; later sends wait in order, and the wait counts
against their timeout.
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

    async def call(self, fn: Callable[[Any], object] | None, arg: object) -> None:
        """Run one callback (awaiting it if it is a coroutine); its exceptions are logged, not raised."""
        if fn is None:
            return
        try:
            outcome = fn(arg)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            # the user's code: visible, but one record a minute per callback function
            limited.log(
                log,
                logging.ERROR,
                ("send-callback", getattr(fn, "__qualname__", type(fn).__qualname__)),
                "the send callback %r raised",
                fn,
                exc_info=True,
            )


class AsyncSendBudget:
    """In-flight async sends, bounded by count and body bytes; waiters are served in order.

    A send larger than the whole byte budget still goes out when nothing else is in flight.
    """

    def __init__(self, max_count: int, max_bytes: int) -> None:
        if max_count < 1 or max_bytes < 1:
            raise MQClientError("the async send budget needs at least one send and one byte")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

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
        while self._waiters:
            size, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self.count += 1
            self.bytes += size
            fut.set_result(None)

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
            await asyncio.wait((fut,), timeout=None if timeout is None else max(timeout, 0.0))
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


# What an async send does once admitted: (prepared message, start time, timeout) -> result.
AsyncRun = Callable[[Outgoing, float, float], Awaitable[SendResult]]


class AsyncSends:
    """The async sends of one producer: each one a task, admitted against the budget,
    reported once to its callbacks, and drained (then failed) when the producer shuts down.

    The producer keeps the sending itself (``run``); this keeps the bookkeeping that every
    kind of async send shares, so the four ``send_*_async`` methods stay one call each."""

    def __init__(self, budget: AsyncSendBudget, clock: Clock, check_running: Callable[[], None]) -> None:
        self.budget = budget
        self.clock = clock
        self.check_running = check_running
        self.tasks: set[asyncio.Task[SendResult]] = set()
        # True while shutdown drains the tasks: a send cancelled then failed because of the
        # shutdown (ClientStateError), not because its caller cancelled it.
        self.draining = False

    def start(
        self,
        prepare: Callable[[], Outgoing],
        run: AsyncRun,
        handler: Callbacks | None,
        timeout: float,
    ) -> asyncio.Future[SendResult]:
        """Prepare now (so later changes to the message do not leak into the send), take a
        budget slot if one is free, and return the task that sends, waiting for a slot
        first if none was. A producer not running or a bad message ends the task with
        that error (and reaches ``on_exception``) instead of raising here."""
        loop = asyncio.get_running_loop()
        started = self.clock.monotonic()
        out: Outgoing | None = None
        error: Exception | None = None
        try:
            self.check_running()
            out = prepare()
        except MQClientError as exc:
            error = exc
        size = len(out.body) if out is not None else 0
        admitted = out is not None and self.budget.try_acquire(size)
        task = loop.create_task(self._run(out, error, run, handler, size, admitted, started, timeout))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if handler is not None and handler.on_exception is not None:
            task.add_done_callback(_mark_retrieved)  # the callback has seen the error
        return task

    async def _run(
        self,
        out: Outgoing | None,
        error: Exception | None,
        run: AsyncRun,
        handler: Callbacks | None,
        size: int,
        acquired: bool,
        started: float,
        timeout: float,
    ) -> SendResult:
        result: SendResult | None = None
        if out is not None:
            try:
                if not acquired:
                    await self.budget.acquire(size, timeout - (self.clock.monotonic() - started))
                    acquired = True
                result = await run(out, started, timeout)
            except asyncio.CancelledError:
                if not self.draining:
                    raise
                error = ClientStateError("the producer shut down before the async send completed")
            except Exception as exc:
                error = exc
            finally:
                if acquired:
                    self.budget.release(size)
        if result is not None:
            if handler is not None:
                await handler.call(handler.on_success, result)
            return result
        assert error is not None
        if handler is not None:
            await handler.call(handler.on_exception, error)
        raise error

    async def drain(self, timeout: float) -> None:
        """Let the sends in flight finish for up to ``timeout`` seconds, then cancel the rest,
        which end with ClientStateError. Called once, by the producer's shutdown."""
        self.draining = True
        if self.tasks:
            _done, left = await asyncio.wait(set(self.tasks), timeout=timeout)
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left)
        self.draining = False


def _mark_retrieved(task: asyncio.Future[SendResult]) -> None:
    """Retrieve a failed task's exception so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
