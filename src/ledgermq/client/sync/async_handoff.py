"""How ``SyncProducer.send_async`` hands sends to the loop thread without waiting for it.

A Java-style loop of async sends from a plain thread must not pay a round trip to the
loop thread per call: before this, each call ran a coroutine on the loop and blocked until
the producer had admitted the send, which cost about 400 µs of client CPU per message
(thread switches, a task and a future per send; ``docs/benchmarks.md``). Here the calling
thread takes the in-flight slot itself (``ThreadAdmission``, the producer's own limits)
and queues the start (``LoopHandoff``); the loop thread starts every queued send in one
callback, woken once per batch rather than once per send.

The admission mirrors the producer's ``AsyncSendBudget`` (same count and byte limits,
same rule for a send bigger than the byte budget) for the facade's sends, so a thread
that outruns the broker blocks here, as Java's semaphore blocks the caller, instead of
queueing without bound. The producer's own budget still admits each send on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from ledgermq.clock import Clock

__all__ = ["LoopHandoff", "ThreadAdmission"]

log = logging.getLogger(__name__)


class ThreadAdmission:
    """In-flight slots taken by calling threads and given back on the loop thread."""

    def __init__(self, max_count: int, max_bytes: int, clock: Clock) -> None:
        self.clock = clock
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._cond = threading.Condition()

    def _fits(self, size: int) -> bool:
        return self.count < self.max_count and (self.count == 0 or self.bytes + size <= self.max_bytes)

    def acquire(self, size: int, timeout: float) -> bool:
        """Take a slot for a send of ``size`` body bytes, waiting at most ``timeout``
        seconds for one; False when the wait ran out."""
        with self._cond:
            if not self._fits(size):
                deadline = self.clock.monotonic() + max(timeout, 0.0)
                while not self._fits(size):
                    left = deadline - self.clock.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            self.count += 1
            self.bytes += size
            return True

    def release(self, size: int) -> None:
        with self._cond:
            self.count -= 1
            self.bytes -= size
            # every waiter looks again: a freed slot may fit a small send and not a big one
            self._cond.notify_all()


class LoopHandoff:
    """Functions queued by any thread, run on the loop thread in the order queued; one
    ``call_soon_threadsafe`` per batch (the loop's wake-up is the expensive part)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def submit(self, fn: Callable[[], None]) -> None:
        """Queue ``fn``; raises RuntimeError when the loop is closed (nothing queued then)."""
        with self._lock:
            if self._scheduled:
                self._queue.append(fn)
                return
            self._loop.call_soon_threadsafe(self._run)
            self._queue.append(fn)
            self._scheduled = True

    def _run(self) -> None:
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
            self._scheduled = False
        for fn in batch:
            try:
                fn()
            except Exception:  # one send's start failing must not drop the others queued with it
                log.exception("starting a queued async send failed")
