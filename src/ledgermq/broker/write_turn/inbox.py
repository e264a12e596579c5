"""The inbox: what other threads tell the broker's loop, one thread-safe wake-up per batch.

The group-commit thread reports the durable offset after each fsync, and the reput thread
reports the queues it made readable (appends the loop did not dispatch itself: a backlog,
DLedger's committed entries, writes from other threads). Each post is a plain fact; the
first post after the loop drained the inbox wakes the loop once (``wake``: the loop's
``call_soon_threadsafe`` of the turn's step), every later post until the drain rides on
that wake-up. Facts are merged as they arrive (the highest durable offset, the highest
max offset per queue), so a slow loop does not make the inbox grow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

Wake = Callable[[], None]
"""Thread-safe: make the loop run the turn's step soon (raises RuntimeError once closed)."""


@dataclass(slots=True)
class Facts:
    """What the inbox held when drained."""

    durable_offset: int = -1  # -1: no fsync reported
    flush_failure: str = ""
    arrivals: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.durable_offset < 0 and not self.flush_failure and not self.arrivals


class Inbox:
    def __init__(self, wake: Wake) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._facts = Facts()
        self.woken = False
        """Something was posted since the last drain (read without the lock: see ``drain``)."""
        self.wakeups = 0  # thread-safe wake-ups sent (one per batch of posts)
        self.wake_failures = 0  # posts after the loop closed (nobody waits any more)

    def post_durable(self, offset: int, failure: OSError | None) -> None:
        """The flush thread's listener (MessageStore.report_flushes)."""
        with self._lock:
            facts = self._facts
            if offset > facts.durable_offset:
                facts.durable_offset = offset
            if failure is not None and not facts.flush_failure:
                facts.flush_failure = f"flush failed: {failure}"
            wake = self._take_wake()
        if wake:
            self._send_wake()

    def post_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The reput thread's arrival listener (MessageStore.add_arrival_listener)."""
        key = (topic, queue_id)
        with self._lock:
            arrivals = self._facts.arrivals
            if arrivals.get(key, -1) < max_offset:
                arrivals[key] = max_offset
            wake = self._take_wake()
        if wake:
            self._send_wake()

    def drain(self) -> Facts | None:
        """Everything posted since the last drain (the loop's step); None when nothing was.

        Read without the lock first: a post sets ``woken`` under it after its fact, and
        a post that finds ``woken`` unset sends a wake-up, so a drain that misses a post in
        progress is followed by another step that takes it. Most steps (a send's, an ack's)
        find nothing posted and then cost no lock and no new ``Facts``."""
        if not self.woken:
            return None
        with self._lock:
            facts, self._facts = self._facts, Facts()
            self.woken = False
        return facts

    def _take_wake(self) -> bool:
        if self.woken:
            return False
        self.woken = True
        return True

    def _send_wake(self) -> None:
        self.wakeups += 1
        try:
            self._wake()
        except RuntimeError:  # the loop is closed: the broker stopped, nobody waits
            self.wake_failures += 1
