"""The scrub's second half: consume queues and index files checked in the background.

The commit log is the truth; queues and the index are derived from it and can rot or be
torn on their own. Each step of the scrub thread checks a bounded number of consume-queue
units against their records (store/queue_check.py: topic, queue id, queue offset, size,
tag code) and then of index entries against their file's header, one queue and one file
after the other, so a full pass over every queue and index file spreads over many steps.

What disagrees is handed to the store: a queue is re-derived from the commit log from its
first bad unit on, an index file is dropped with its successors and rebuilt. Both run on
the scrub thread under the dispatch lock (store/integrity.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ledgermq.store.consumequeue import UNIT, UNIT_SIZE, ConsumeQueue
from ledgermq.store.index import IndexFile, IndexService
from ledgermq.store.queue_check import QueueCheckContext, unit_problem

log = logging.getLogger(__name__)

BadQueue = Callable[[ConsumeQueue, int, str], None]  # queue, first bad offset, why
BadIndex = Callable[[IndexFile, str], None]
_CHUNK = 512  # units read at once


class DerivedScrub:
    """Cursor over every queue's units, then every index file's entries."""

    def __init__(
        self, ctx: QueueCheckContext, index: IndexService | None, on_bad_queue: BadQueue, on_bad_index: BadIndex
    ) -> None:
        self.ctx = ctx
        self.index = index
        self.on_bad_queue = on_bad_queue
        self.on_bad_index = on_bad_index
        self.passes = 0
        self._queues: list[ConsumeQueue] = []
        self._qi = 0  # next queue in ``_queues``
        self._k = -1  # next unit of that queue (-1: from its minimum)
        self._files: list[IndexFile] = []
        self._fi = 0
        self._entry = 1
        self._started = False

    def step(self, budget: int) -> int:
        """Check up to ``budget`` units or entries; return how many were checked."""
        if not self._started:
            self._queues = self.ctx.queues.all()
            self._files = list(self.index.files) if self.index is not None else []
            self._qi, self._k, self._fi, self._entry = 0, -1, 0, 1
            self._started = True
        done = 0
        while done < budget and self._qi < len(self._queues):
            done += self._check_queue(self._queues[self._qi], budget - done)
        while done < budget and self._qi >= len(self._queues) and self._fi < len(self._files):
            done += self._check_index(self._files[self._fi], budget - done)
        if self._qi >= len(self._queues) and self._fi >= len(self._files):
            self._started = False
            self.passes += 1
        return done

    def _check_queue(self, cq: ConsumeQueue, budget: int) -> int:
        k = max(self._k, cq.min_offset)
        end = min(cq.max_offset, k + min(budget, _CHUNK))
        raw = cq.read_units(k, end - k) if end > k else b""
        checked = 0
        for i, (phy, size, tags) in enumerate(UNIT.iter_unpack(raw[: len(raw) - len(raw) % UNIT_SIZE])):
            checked += 1
            why = unit_problem(self.ctx, cq, k + i, (phy, size, tags))
            if why is not None:
                log.error("scrub: consume queue %s-%d unit %d %s", cq.topic, cq.queue_id, k + i, why)
                self.ctx.queues.stats.add("units_checked", checked)  # the bad one included
                self.on_bad_queue(cq, k + i, why)
                self._next_queue()
                return checked
        self.ctx.queues.stats.add("units_checked", checked)
        if not raw or k + checked >= cq.max_offset:
            self._next_queue()
        else:
            self._k = k + checked
        return max(checked, 1)

    def _next_queue(self) -> None:
        self._qi += 1
        self._k = -1

    def _check_index(self, f: IndexFile, budget: int) -> int:
        """Entries 1..count-1, then the hash slots, ``budget`` at a time, under the index
        lock (the active file grows meanwhile: its header and entries move together)."""
        index = self.index
        assert index is not None
        with index.lock:
            if f not in index.files:
                self._fi += 1  # dropped meanwhile
                return 1
            if self._entry < f.count:
                last = min(f.count, self._entry + budget)
                why = f.entries_problem(self._entry, last)
                checked = last - self._entry
                self._entry = last
            else:
                slot = self._entry - f.count
                why = f.slots_problem(slot, slot + budget)
                checked = min(budget, f.slots - slot)
                self._entry += checked
                if slot + checked >= f.slots:
                    self._fi += 1
                    self._entry = 1
        if why is not None:
            log.error("scrub: index file %s: %s", f.path.name, why)
            self.on_bad_index(f, why)
            self._fi = len(self._files)  # later files were dropped with it
        return max(checked, 1)
