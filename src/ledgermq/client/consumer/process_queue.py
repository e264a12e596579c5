"""The client-side buffer of one assigned queue (RocketMQ 4.9.7 ``ProcessQueue``).

Pulled messages wait here, keyed by queue offset, until the listener has consumed them.
The buffer answers the three questions the push consumer asks:

* flow control: how many messages and bytes are cached, and the offset span between the
  oldest and the newest (pulling pauses when a limit is passed);
* progress: after a batch is consumed, ``remove_message`` returns the offset the group may
  commit, the smallest offset still in flight (or one past the newest when none is), so
  a slow message never lets the committed offset pass it;
* ownership: ``dropped`` (rebalanced away; its pull loop and consumers stop), ``locked``
  (orderly consumption holds the broker lock) and when the queue was last pulled.

Orderly consumption takes messages out in offset order (``take_messages``) into a
"consuming" table, then either ``commit`` s them or puts them back
(``make_message_to_consume_again`` / ``rollback``).

All methods run on the event loop thread and never await, so each is atomic with respect
to the consumer's coroutines (Java guards the same state with a read-write lock because
its callers are threads). ``consume_lock`` is the one lock that spans awaits: orderly
consumption holds it while a batch is in the listener, and a rebalance that wants to
unlock the queue waits for it.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterable, Sequence
from typing import Any

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.message import MessageRecord

__all__ = [
    "PROPERTY_CONSUME_START_TIME",
    "PULL_MAX_IDLE_TIME",
    "REBALANCE_LOCK_INTERVAL",
    "REBALANCE_LOCK_MAX_LIVE_TIME",
    "ProcessQueue",
]

REBALANCE_LOCK_MAX_LIVE_TIME = 30.0
"""Seconds a broker lock is trusted after it was last confirmed."""
REBALANCE_LOCK_INTERVAL = 20.0
"""Seconds between two rounds of re-locking every orderly queue."""
PULL_MAX_IDLE_TIME = 120.0
"""A queue not pulled for this long is taken as stuck; the rebalance re-creates it."""
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"


class ProcessQueue:
    """Messages of one queue between pull and consumption."""

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        lock_max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME,
        pull_max_idle_time: float = PULL_MAX_IDLE_TIME,
    ) -> None:
        self.clock = clock
        self.lock_max_live_time = lock_max_live_time
        self.pull_max_idle_time = pull_max_idle_time
        self._msgs: dict[int, MessageRecord] = {}
        self._offsets: list[int] = []  # the keys of _msgs, sorted
        self._consuming: dict[int, MessageRecord] = {}  # orderly: taken, not yet committed
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.locked = False
        self.consuming = False
        self.msg_acc_cnt = 0
        self.try_unlock_times = 0
        now = clock.monotonic()
        self.last_pull_time = now
        self.last_consume_time = now
        self.last_lock_time = now
        self.consume_lock = asyncio.Lock()

    # -- state ---------------------------------------------------------------------------
    @property
    def lock_expired(self) -> bool:
        return self.clock.monotonic() - self.last_lock_time > self.lock_max_live_time

    @property
    def pull_expired(self) -> bool:
        return self.clock.monotonic() - self.last_pull_time > self.pull_max_idle_time

    def mark_pulled(self) -> None:
        self.last_pull_time = self.clock.monotonic()

    def mark_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_time = self.clock.monotonic()

    @property
    def max_span(self) -> int:
        """Offset distance between the oldest and the newest cached message."""
        if not self._offsets:
            return 0
        return self._offsets[-1] - self._offsets[0]

    def has_temp_message(self) -> bool:
        return bool(self._msgs)

    def first_offset(self) -> int | None:
        return self._offsets[0] if self._offsets else None

    def cached_messages(self) -> list[MessageRecord]:
        """The cached messages in offset order (a copy)."""
        return [self._msgs[o] for o in self._offsets]

    # -- concurrently --------------------------------------------------------------------
    def put_message(self, msgs: Sequence[MessageRecord]) -> bool:
        """Cache a pulled batch; True when a consumer should be started for this queue
        (orderly consumption dispatches only when no consumer is already running)."""
        added = 0
        for msg in msgs:
            off = msg.queue_offset
            if off not in self._msgs:
                bisect.insort(self._offsets, off)
                added += 1
                self.queue_offset_max = off
                self.msg_size += len(msg.body)
            self._msgs[off] = msg
        self.msg_count += added
        dispatch = False
        if self._msgs and not self.consuming:
            dispatch = True
            self.consuming = True
        if msgs:
            last = msgs[-1]
            max_text = last.properties.get("MAX_OFFSET")
            if max_text is not None:
                try:
                    acc = int(max_text) - last.queue_offset
                except ValueError:
                    acc = 0
                if acc > 0:
                    self.msg_acc_cnt = acc
        return dispatch

    def remove_message(self, msgs: Iterable[MessageRecord]) -> int:
        """Forget consumed messages; the offset the group may now commit, -1 if the
        buffer was already empty."""
        self.last_consume_time = self.clock.monotonic()
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        for msg in msgs:
            off = msg.queue_offset
            prev = self._msgs.pop(off, None)
            if prev is not None:
                del self._offsets[bisect.bisect_left(self._offsets, off)]
                self.msg_count -= 1
                self.msg_size -= len(prev.body)
        if self._offsets:
            result = self._offsets[0]
        return result

    def expired_head(self, timeout_s: float, now_ms: int) -> MessageRecord | None:
        """The oldest cached message if its consumption started more than ``timeout_s`` ago
        (``cleanExpiredMsg``'s test)."""
        if not self._offsets:
            return None
        msg = self._msgs[self._offsets[0]]
        start = msg.properties.get(PROPERTY_CONSUME_START_TIME)
        if start and start.isdigit() and now_ms - int(start) > timeout_s * 1000:
            return msg
        return None

    # -- orderly -------------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageRecord]:
        """Up to ``batch_size`` oldest messages, moved into the consuming table. An empty
        answer ends this queue's consumer run (``consuming`` turns False)."""
        self.last_consume_time = self.clock.monotonic()
        n = min(batch_size, len(self._offsets))
        taken = self._offsets[:n]
        del self._offsets[:n]
        out: list[MessageRecord] = []
        for off in taken:
            msg = self._msgs.pop(off)
            self._consuming[off] = msg
            out.append(msg)
        if not out:
            self.consuming = False
        return out

    def commit(self) -> int:
        """The taken messages are consumed; the offset after the newest of them (-1 if none)."""
        if not self._consuming:
            return -1
        last = max(self._consuming)
        self.msg_count -= len(self._consuming)
        self.msg_size -= sum(len(m.body) for m in self._consuming.values())
        self._consuming.clear()
        return last + 1

    def make_message_to_consume_again(self, msgs: Iterable[MessageRecord]) -> None:
        """Put taken messages back in front of the cache (orderly re-consumption)."""
        for msg in msgs:
            off = msg.queue_offset
            self._consuming.pop(off, None)
            if off not in self._msgs:
                bisect.insort(self._offsets, off)
            self._msgs[off] = msg

    def rollback(self) -> None:
        """Put every taken message back."""
        self.make_message_to_consume_again(list(self._consuming.values()))

    def clear(self) -> None:
        self._msgs.clear()
        self._offsets.clear()
        self._consuming.clear()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    # -- reporting -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """``ProcessQueueInfo`` (Java field names, wall-clock ms timestamps)."""
        mono = self.clock.monotonic()
        wall = self.clock.wall_ms()

        def ms(t: float) -> int:
            return wall - int((mono - t) * 1000)

        doc: dict[str, Any] = {
            "cachedMsgCount": len(self._msgs),
            "cachedMsgMaxOffset": self._offsets[-1] if self._offsets else 0,
            "cachedMsgMinOffset": self._offsets[0] if self._offsets else 0,
            "cachedMsgSizeInMiB": self.msg_size // (1024 * 1024),
            "commitOffset": 0,
            "droped": self.dropped,
            "lastConsumeTimestamp": ms(self.last_consume_time),
            "lastLockTimestamp": ms(self.last_lock_time),
            "lastPullTimestamp": ms(self.last_pull_time),
            "locked": self.locked,
            "transactionMsgCount": len(self._consuming),
            "transactionMsgMaxOffset": max(self._consuming) if self._consuming else 0,
            "transactionMsgMinOffset": min(self._consuming) if self._consuming else 0,
            "tryUnlockTimes": self.try_unlock_times,
        }
        return doc
