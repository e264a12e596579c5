"""Queue locks for orderly consumers (RocketMQ ``RebalanceLockManager``).

An orderly consumer locks each queue it was assigned (LOCK_BATCH_MQ) before consuming
it and renews the lock every 20 s; a lock not renewed for
``rocketmq.broker.rebalance.lockMaxLiveTime`` (60 s) is free for another client of the
group. Unlocking (UNLOCK_BATCH_MQ) only releases queues the asking client holds.

Locks live in memory only, as in RocketMQ: after a broker restart every queue is free
and the consumers re-lock within one rebalance. All calls come from the event loop and
never await, so no lock object is needed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ledgermq.clock import Clock
from ledgermq.protocol.admin_body import MessageQueue

log = logging.getLogger(__name__)

LOCK_MAX_LIVE_TIME_MS = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update: float  # clock.monotonic() seconds


class RebalanceLockManager:
    def __init__(self, clock: Clock, max_live_ms: int = LOCK_MAX_LIVE_TIME_MS) -> None:
        self.clock = clock
        self.max_live_s = max_live_ms / 1000
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.max_live_s

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """The queues now locked by ``client_id``: free, expired or already its own (renewed)."""
        now = self.clock.monotonic()
        locks = self.table.setdefault(group, {})
        granted: set[MessageQueue] = set()
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None:
                locks[mq] = LockEntry(client_id, now)
                log.info("lock %s of %s: free, granted to %s", mq, group, client_id)
            elif entry.client_id == client_id:
                entry.last_update = now
            elif self._expired(entry, now):
                log.warning("lock %s of %s: %s's lock expired, granted to %s", mq, group, entry.client_id, client_id)
                entry.client_id, entry.last_update = client_id, now
            else:
                log.debug("lock %s of %s: held by %s, refused to %s", mq, group, entry.client_id, client_id)
                continue
            granted.add(mq)
        if not locks:
            del self.table[group]
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds (expired or not); others' locks stay."""
        locks = self.table.get(group)
        if locks is None:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None:
                continue
            if entry.client_id == client_id:
                del locks[mq]
                log.info("unlock %s of %s by %s", mq, group, client_id)
            else:
                log.warning("unlock %s of %s by %s refused: held by %s", mq, group, client_id, entry.client_id)
        if not locks:
            del self.table[group]

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        """Who holds the queue now (None when free or expired)."""
        entry = self.table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self.clock.monotonic()):
            return None
        return entry.client_id
