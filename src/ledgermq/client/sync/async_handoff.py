"""The pieces ``SyncProducer.send_async`` hands sends to the loop thread with, without
waiting for it (``client/sync/async_send.py`` puts them together).

A Java-style loop of async sends from a plain thread must not pay a round trip to the
loop thread per call: before these, each call ran a coroutine on the loop and blocked until
the producer had admitted the send, about 400 µs of client CPU per message (thread
switches, a task and a future per send; ``docs/benchmarks.md``). Now the calling thread
takes the in-flight slot itself (``ThreadAdmission``, the producer's own limits), queues
the start (``LoopHandoff``), and the loop thread starts every queued send in one callback,
woken once per batch rather than once per send. ``Outstanding`` counts the returned
futures not yet completed, so a shutdown can wait for their callbacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ledgermq.clock import Clock

__all__ = ["Admission", "LoopHandoff", "Outstanding", "ThreadAdmission"]

log = logging.getLogger(__name__)


class Admission:
    """What ``ThreadAdmission.acquire`` says."""

    GRANTED = "granted"
    TIMED_OUT = "timed out"
    CLOSED = "closed"


class ThreadAdmission:
    """In-flight slots taken by calling threads, in the order they asked (as the
    producer's ``AsyncSendBudget`` serves its waiters), and given back on the loop thread.
    The limits are the producer's: count, and body bytes (a send bigger than the whole
    byte budget still goes when nothing else is in flight)."""

    def __init__(self, max_count: int, max_bytes: int, clock: Clock) -> None:
        self.clock = clock
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self.closed = False
        self._cond = threading.Condition()
        self._waiters: deque[object] = deque()  # tickets of the threads waiting, in order

    def _fits(self, size: int) -> bool:
        return self.count < self.max_count and (self.count == 0 or self.bytes + size <= self.max_bytes)

    def acquire(self, size: int, timeout: float) -> str:
        """Take a slot for a send of ``size`` body bytes, waiting at most ``timeout``
        seconds for one, behind every thread that asked before: ``Admission.GRANTED``,
        ``TIMED_OUT`` or ``CLOSED`` (``close`` was called; nothing taken)."""
        with self._cond:
            if self.closed:
                return Admission.CLOSED
            if not self._waiters and self._fits(size):
                self._take(size)
                return Admission.GRANTED
            ticket = object()
            self._waiters.append(ticket)
            deadline = self.clock.monotonic() + max(timeout, 0.0)
            try:
                while not self.closed and not (self._waiters[0] is ticket and self._fits(size)):
                    left = deadline - self.clock.monotonic()
                    if left <= 0:
                        return Admission.TIMED_OUT
                    self._cond.wait(left)
                if self.closed:
                    return Admission.CLOSED
                self._take(size)
                return Admission.GRANTED
            finally:
                self._waiters.remove(ticket)
                self._cond.notify_all()  # the next in line may fit now

    def _take(self, size: int) -> None:
        self.count += 1
        self.bytes += size

    def release(self, size: int) -> None:
        with self._cond:
            self.count -= 1
            self.bytes -= size
            self._cond.notify_all()

    def close(self) -> None:
        """Refuse every later ``acquire`` and wake the threads waiting in one."""
        with self._cond:
            self.closed = True
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


class Outstanding:
    """The facade's async-send futures not yet completed (their callbacks not yet run)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0

    def track(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._cond:
            self.count += 1
        fut.add_done_callback(self._done)  # every way it ends: answered, failed, cancelled

    def _done(self, _fut: concurrent.futures.Future[Any]) -> None:
        with self._cond:
            self.count -= 1
            self._cond.notify_all()

    def wait_until(self, left: int) -> None:
        """Block until at most ``left`` futures are outstanding (a callback that shuts its
        own producer down waits for the others, not for itself)."""
        with self._cond:
            self._cond.wait_for(lambda: self.count <= left)
