"""The in-flight budget of a producer's async sends: it keeps a fast producing loop from
queueing without bound.

The budget (256 sends, 64 MiB of bodies) matches the broker's per-connection in-flight
limit, past which it answers SYSTEM_BUSY; later sends wait in order, and the wait counts
against their timeout. A send waiting for a slot is an entry in the budget's queue, not a
task: admitted, it starts from the step that freed the slot. The waits' deadlines share
one timer (armed at the earliest), so a loop that fires 30,000 ``send_async`` calls makes
no timer, future or task per waiting send. That timer is a ``loop.call_at`` handle, so the
deadlines are on the loop's own clock (tests drive it with a virtual-time loop).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from ledgermq.client.errors import MQClientError

__all__ = ["AsyncBackPressureError", "AsyncSendBudget", "Queued"]


class AsyncBackPressureError(MQClientError):
    """An async send waited its whole timeout for an in-flight slot (Java's RemotingTooMuchRequestException)."""


class Queued:
    """What waits in the budget's queue for a slot: ``size`` body bytes, a ``deadline`` on
    the loop's clock, ``grant(self)`` run when admitted (the slot taken), ``expire(self)``
    when the deadline passes first. ``withdrawn`` is True once either ran or the owner
    withdrew it. Whoever queues subclasses this (the async send's op is its own entry, so a
    waiting send costs no entry, tuple or dict slot of its own) and sets ``withdrawn = True``
    while not queued; ``grant`` and ``expire`` are the owner's, the same for every entry."""

    __slots__ = ("deadline", "expire", "grant", "size", "withdrawn")

    size: int
    deadline: float
    withdrawn: bool
    grant: Callable[[Any], None]
    expire: Callable[[Any], None]


_Waiter = tuple[int, asyncio.Future[None]] | Queued


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

    def enqueue(self, entry: Queued, timeout: float) -> None:
        """Queue ``entry`` (its ``size``, ``grant`` and ``expire`` set) for a slot, for up to
        ``timeout`` seconds. ``withdraw`` it if it ends otherwise. The callbacks are the
        owner's, the same for every entry, and are handed the entry: a loop that queues
        20,000 sends then makes no closure or extra object per send (each one lived until
        its turn, and the collector walked them all, again and again)."""
        loop = asyncio.get_running_loop()
        entry.deadline = deadline = loop.time() + max(timeout, 0.0)
        entry.withdrawn = False
        self._waiters.append(entry)
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)

    def withdraw(self, entry: Queued) -> None:
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
        expired = [w for w in self._waiters if isinstance(w, Queued) and not w.withdrawn and w.deadline <= now]
        for entry in expired:
            entry.withdrawn = True
            entry.expire(entry)
        left = [w.deadline for w in self._waiters if isinstance(w, Queued) and not w.withdrawn]
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
            if isinstance(head, Queued):
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
            if isinstance(head, Queued):
                head.withdrawn = True
                head.grant(head)
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
