"""Answers waiting for an offset to be reached: SYNC_FLUSH sends waiting for their fsync.

Why not a future and a timer per waiter: under group commit one fsync covers hundreds of
sends, and each of them then cost a cross-thread wake-up, a wrapped future, a timer and a
task. Here the flush thread reports once per fsync (one ``call_soon_threadsafe``), and
the waiters sit in a deque: puts append in offset order on the loop thread and share one
timeout, so both the releases and the expiries take from the left, with one timer armed
for the oldest deadline. An offset added out of order is only released late, never early.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

Reached = Callable[[bool, str], None]
"""Told once: True when the offset was reached; False with a reason (timeout, failure)."""


class OffsetWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.loop = loop
        self.timeout_s = timeout_s
        self.reached_offset = 0
        self.failure = ""  # sticky: once an fsync failed nothing is durable any more
        self._waiting: collections.deque[tuple[int, float, Reached]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, offset: int, callback: Reached) -> None:
        """Call ``callback`` once ``offset`` is reached (loop thread)."""
        if self.failure:
            callback(False, self.failure)
            return
        if offset <= self.reached_offset:
            callback(True, "")
            return
        deadline = self.loop.time() + self.timeout_s
        self._waiting.append((offset, deadline, callback))
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._expire)

    def report_from_thread(self, offset: int, failure: OSError | None) -> None:
        """The flush thread's listener: hand the outcome to the loop in one call."""
        try:
            self.loop.call_soon_threadsafe(self.reached, offset, f"flush failed: {failure}" if failure else "")
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def reached(self, offset: int, failure: str = "") -> None:
        """``offset`` is reached (or ``failure`` ended all hope): release who waits for it."""
        if offset > self.reached_offset:
            self.reached_offset = offset
        waiting = self._waiting
        while waiting and waiting[0][0] <= offset:
            self._call(waiting.popleft()[2], True, "")
        if failure and not self.failure:
            self.failure = failure
            while waiting:
                self._call(waiting.popleft()[2], False, failure)

    def _expire(self) -> None:
        self._timer = None
        waiting = self._waiting
        now = self.loop.time()
        while waiting and waiting[0][1] <= now:
            self._call(waiting.popleft()[2], False, "")
        if waiting:
            self._timer = self.loop.call_at(waiting[0][1], self._expire)

    @staticmethod
    def _call(callback: Reached, reached: bool, reason: str) -> None:
        try:
            callback(reached, reason)
        except Exception:
            log.exception("an offset waiter failed")
