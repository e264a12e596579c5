"""The store's corruption interface: damaged ranges, their listeners, and repair.

``NativeMessageStore`` holds a ``StoreIntegrity`` and forwards its public methods to it.
Commit-log offsets are physical offsets and ranges are half-open ``[start, end)``. A
master's and a slave's commit logs are byte-identical at the same offsets, so a damaged
range on one replica is repaired with the other's bytes for exactly that range
(``repair_range``); until then every path that hands commit-log bytes out refuses the
range with ``CorruptRangeError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

from ledgermq.config import StoreConfig
from ledgermq.errors import CorruptRangeError
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.core import StoreCore
from ledgermq.store.derived_scrub import DerivedScrub
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.index import IndexFile
from ledgermq.store.queue_check import QueueCheckContext, check_tails, rederive
from ledgermq.store.record_walk import walk_records
from ledgermq.store.recovery import RecoveryResult
from ledgermq.store.repair import validate_repair
from ledgermq.store.reput import DispatchService, redispatch
from ledgermq.store.scrub import ScrubService

log = logging.getLogger(__name__)


class StoreIntegrity:
    """Damage bookkeeping, scrubbing and repair of a native store's commit log and of what
    derives from it."""

    def __init__(self, core: StoreCore, commitlog: CommitLog) -> None:
        self.core = core  # its reput is set at start
        self.commitlog = commitlog
        self.queues = core.queues
        self.index = core.index
        self.damage = core.damage
        self.delay_levels_ms = core.delay_levels_ms
        self.digests = SegmentDigests(core.root / "digests" / "commitlog", core.config.mapped_file_size_commitlog)
        self.scrubber: ScrubService | None = None  # set by the store's start
        self._repair_lock = threading.Lock()
        self._repair_hints: dict[int, int] = {}  # where earlier repairs ended -> the record boundary before it

    @property
    def config(self) -> StoreConfig:
        return self.core.config

    @property
    def reput(self) -> DispatchService | None:
        return self.core.reput

    def damaged_ranges(self) -> list[tuple[int, int]]:
        """Commit-log ranges known corrupt and not yet repaired (sorted, disjoint)."""
        return self.damage.ranges()

    def report_damage(self, start: int, end: int, reason: str) -> bool:
        """Register corruption someone found in [start, end); True if it was new.

        Logs an ERROR once, counts it and calls the damage listeners (from this thread)."""
        return self.damage.report(start, end, reason)

    def add_damage_listener(self, listener: Callable[[int, int, str], None]) -> None:
        """``listener(start, end, reason)`` runs for every newly registered range, on the
        thread that found it (scrub, recovery, a read): it must be thread-safe."""
        self.damage.add_listener(listener)

    def repair_range(self, start: int, data: bytes | memoryview, source: str) -> None:
        """Overwrite [start, start + len(data)) with a healthy replica's bytes.

        Everything is validated first (store/repair.py): the range lies inside the log,
        every complete record in it is sound and names its own offset, and sealed segments'
        digests match. Nothing is written when validation fails (CorruptRangeError or
        ValueError says why). Then the bytes are written in place and made durable, their
        records dispatched again, and the range leaves ``damaged_ranges()``."""
        view = memoryview(data).cast("B")
        end = start + len(view)
        with self._repair_lock:
            low, high = self.commitlog.min_offset, self.commitlog.max_offset
            if not view or start < low or end > high:
                raise ValueError(f"repair of [{start}, {end}) is outside the commit log [{low}, {high})")
            plan = validate_repair(
                self.commitlog, self.damage, self.digests, start, view, self.delay_levels_ms, self._repair_hints
            )
            pos = start
            while pos < end:
                mf = self.commitlog.queue.find(pos)
                if mf is None or not mf.pin():
                    raise CorruptRangeError(start, end, f"segment holding {pos} is gone")
                try:
                    n = min(end - pos, mf.end_offset - pos)
                    at = pos - mf.start_offset
                    chunk = view[pos - start : pos - start + n]
                    while chunk:
                        wrote = os.pwrite(mf.fd, chunk, at)
                        chunk = chunk[wrote:]
                        at += wrote
                    os.fdatasync(mf.fd)
                finally:
                    mf.unpin()
                pos += n
            reput = self.reput
            with reput.holding_long() if reput is not None else contextlib.nullcontext():
                for req in plan.records:  # units rewritten where they disagree (placeholders)
                    if reput is None or req.commit_log_offset < reput.reput_from:
                        redispatch(req, self.queues, self.index)
            self.damage.repaired(start, end)
            if len(self._repair_hints) > 1024:
                self._repair_hints.clear()
            self._repair_hints.update(plan.boundaries)
        log.warning("repaired commit log [%d, %d) from %s", start, end, source)

    # -- consume queues and the index against the commit log (store/queue_check.py) ----
    def _queue_check_context(self) -> QueueCheckContext:
        return QueueCheckContext(self.commitlog, self.queues, self.damage, self.delay_levels_ms)

    def check_derived_at_start(self, recovery: RecoveryResult, index_rebuild_from: int | None) -> None:
        """After recovery, before dispatch starts. After a crash (queue writes may be torn,
        or ahead of or behind the commit log): re-derive queues whose tail disagrees with
        the commit log. A clean stop flushed consistent queues; rot while stopped is the
        scrub's (a start after a clean stop opens no queue file, queue_positions.py).
        After a clean stop, re-index what index files that failed their checks held
        (after a crash recovery's scan covers it)."""
        if recovery.abnormal:
            check_tails(self._queue_check_context(), recovery.reput_from)
        elif self.index is not None and index_rebuild_from is not None:
            self._reindex(index_rebuild_from, recovery.reput_from)

    def _reindex(self, start: int, stop: int) -> None:
        assert self.index is not None
        count = 0
        for req in walk_records(self.commitlog, self.damage, start, stop, self.delay_levels_ms, "index rebuild"):
            self.index.build(req)
            count += 1
        log.warning("rebuilt the index from the commit log [%d, %d): %d records", start, stop, count)

    def _rederive_online(self, cq: ConsumeQueue, first_bad: int, why: str) -> None:
        """The scrub found unit ``first_bad`` of ``cq`` wrong: re-derive the queue from there
        while dispatch waits (records below where dispatch stands; it does the rest)."""
        reput = self.reput
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            stop = reput.reput_from if reput is not None else self.commitlog.max_offset
            rederive(self._queue_check_context(), {cq: first_bad}, stop)

    def _rebuild_index_online(self, bad: IndexFile, why: str) -> None:
        """The scrub found ``bad`` broken: drop it and later files, re-index while dispatch waits."""
        if self.index is None:
            return
        reput = self.reput
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            log.error("index file %s is broken (%s); dropping it and later files, rebuilding", bad.path.name, why)
            start = self.index.drop_from(bad)
            self._reindex(start, reput.reput_from if reput is not None else self.commitlog.max_offset)

    def derived_scrub(self) -> DerivedScrub:
        return DerivedScrub(self._queue_check_context(), self.index, self._rederive_online, self._rebuild_index_online)

    def scrub_info(self) -> dict[str, str]:
        return {
            "storeScrubbedBytes": str(self.scrubber.scrubbed_bytes if self.scrubber else 0),
            "storeLastScrubMillis": str(self.scrubber.last_pass_ms if self.scrubber else 0),
        }
