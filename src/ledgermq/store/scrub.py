"""The background integrity thread: digests for newly sealed segments, and the scrub.

Digests: once the segment being written is full and flushed, its per-block CRCs are
written beside the commit log (store/digests.py). A segment without a digest that was not
sealed by this process (a RocketMQ store, a crash between sealing and writing, a digest
file found unusable and removed) gets one only after a scrub walk found every record in it
sound and no damage registered in it: from then on the scrub covers header and properties
flips there too. (A flip between that walk and the digest's write would be taken into the
digest; the record checks on every read still see body flips.)

Scrub: sealed segments are re-read at ``storeScrubBytesPerSecond`` at most, a full pass
at most every ``storeScrubIntervalSeconds``. A segment with a digest is checked block by
block (any flipped byte shows); one without is walked record by record (magic, size, own
offset, body CRC, fields adding up). What fails is registered as damaged (record-aligned)
and the damage listeners are called from this thread. A digest block that differs is
narrowed to the records in it that fail their own checks, so the healthy records of the
block are still served while the repair is pending; when none of them fails, the whole
block's records are registered. (A repair that leaves the block still differing from its
digest registers the rest of it then: store/repair.py.) A failing step is logged and
counted by ``ServiceThread``; the loop goes on.

After the commit log, each step checks consume-queue units and index entries
(store/derived_scrub.py) at ``storeScrubBytesPerSecond / 4096`` units per second (a unit
check reads about a page of the commit log).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ledgermq.clock import Clock
from ledgermq.errors import ConfigError
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.derived_scrub import DerivedScrub
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dispatch import BLANK, DispatchRequest, Verdict, check_record
from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.record_check import bad_records, next_sound_record, records_around
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

STEP_S = 0.25  # the thread wakes this often; each wake scrubs rate * STEP_S bytes at most
UNIT_COST = 4096  # scrub budget bytes charged per consume-queue unit or index entry checked


@dataclass(frozen=True, slots=True)
class ScrubSettings:
    enable: bool = True
    bytes_per_second: int = 32 * 1024 * 1024
    interval_seconds: int = 3600

    def __post_init__(self) -> None:
        if self.bytes_per_second <= 0:
            raise ConfigError(f"storeScrubBytesPerSecond must be positive, got {self.bytes_per_second}")
        if self.interval_seconds < 0:
            raise ConfigError(f"storeScrubIntervalSeconds must not be negative, got {self.interval_seconds}")


class ScrubService(ServiceThread):
    name = "store-scrub"

    def __init__(
        self,
        commitlog: CommitLog,
        digests: SegmentDigests,
        damage: DamageRegistry,
        settings: ScrubSettings,
        clock: Clock,
    ) -> None:
        super().__init__(STEP_S)
        self.commitlog = commitlog
        self.digests = digests
        self.damage = damage
        self.settings = settings
        self.clock = clock
        files = commitlog.queue.files
        # Segments whose digest may only follow a clean record walk: sealed before this run
        # (their bytes may already differ from what was written), or whose digest this run
        # wrote once (if it goes missing, it is not rewritten from unchecked bytes).
        self._check_first = {mf.start_offset for mf in files[:-1]}
        self._clean_walk: dict[int, bool] = {}  # segment -> no failure so far in this walk
        self.derived: DerivedScrub | None = None  # consume queues and index (set by the store)
        self._derived_budget = 0.0
        self.digests_after_walk = 0
        self.scrubbed_bytes = 0
        self.passes = 0
        self.last_pass_ms = 0
        self._pass_started_ms = 0
        self._cursor: int | None = None  # commit-log offset the scrub goes on from
        self._budget = 0.0

    # -- the loop --------------------------------------------------------------------
    def step(self) -> None:
        self.write_digests()
        if self.settings.enable:
            self._budget = min(self._budget + self.settings.bytes_per_second * STEP_S, 64 * 1024 * 1024)
            self.scrub_some()
            if self.derived is not None:
                rate = self.settings.bytes_per_second / UNIT_COST
                self._derived_budget = min(self._derived_budget + rate * STEP_S, 64 * 1024)
                if self._derived_budget >= 1:
                    self._derived_budget -= self.derived.step(int(self._derived_budget))

    def write_digests(self) -> None:
        """Digest every segment sealed (full, flushed) during this run that has none."""
        for mf in self.commitlog.queue.files[:-1]:
            start = mf.start_offset
            if start in self._check_first or mf.flushed < mf.size or self.digests.has(start):
                continue
            if self.damage.overlapping(start, mf.end_offset) is not None:
                continue  # a digest now would make the damage look right: after the repair
            if not mf.pin():
                continue
            try:
                self.digests.write(start, mf.mm)
            except SegmentGoneError:
                continue
            finally:
                mf.unpin()
            self._check_first.add(start)
            log.info("wrote digest of sealed commit-log segment %s", mf.path.name)

    def scrub_some(self) -> None:
        """Check up to the byte budget of sealed segments, from where the last step stopped."""
        now = self.clock.wall_ms()
        if self._cursor is None:
            if self.passes and now - self._pass_started_ms < self.settings.interval_seconds * 1000:
                return
            self._cursor = self.commitlog.min_offset
            self._pass_started_ms = now
            self.digests.forget_before(self.commitlog.min_offset)  # retention removed those segments
            self.damage.drop_before(self.commitlog.min_offset)
        while self._budget > 0 and not self.stopping:
            files = self.commitlog.queue.files
            sealed = files[:-1]
            mf = next((f for f in sealed if f.end_offset > self._cursor), None)
            if mf is None:
                self._finish_pass(now)
                return
            self._cursor = max(self._cursor, mf.start_offset)
            took = self._check(mf, self._cursor - mf.start_offset, int(self._budget))
            self._budget -= took
            self.scrubbed_bytes += took
            self._cursor += took

    def _finish_pass(self, now: int) -> None:
        self._cursor = None
        self.passes += 1
        self.last_pass_ms = now
        log.info("scrub pass %d done: %d bytes checked so far", self.passes, self.scrubbed_bytes)

    # -- checking ----------------------------------------------------------------------
    def _check(self, mf: MappedFile, pos: int, budget: int) -> int:
        """Check part of ``mf`` from ``pos``; return how many bytes were covered."""
        if not mf.pin():
            return mf.size - pos  # deleted meanwhile: nothing to check
        try:
            if self.digests.get(mf.start_offset) is not None:
                return self._check_blocks(mf, pos, budget)
            if pos == 0:
                self._clean_walk[mf.start_offset] = True
            took = self._check_records(mf, pos, budget)
            if pos + took >= mf.size:
                self._digest_after_walk(mf)
            return took
        except SegmentGoneError:
            return mf.size - pos
        finally:
            mf.unpin()

    def _check_blocks(self, mf: MappedFile, pos: int, budget: int) -> int:
        block = self.digests.block_size
        end = min(mf.size, pos + max(budget - budget % block, block))
        bad = self.digests.bad_blocks(mf.start_offset, pos, mf.mm[pos:end]) or []  # a copy: no export pins the map
        for lo, hi in bad:
            self._report_block(mf, lo, hi)
        return end - pos

    def _report_block(self, mf: MappedFile, lo: int, hi: int) -> None:
        """A digest block [lo, hi) differs: register the records in it that fail their own
        checks (``bad_records``), so its healthy records stay readable while the repair is
        pending; when none fails (the changed byte is in a field only the digest covers),
        every record the block touches."""
        base = mf.start_offset
        what = f"scrub: digest block [{base + lo}, {base + hi}) differs"
        self._clean_walk[base] = False
        start, end = records_around(mf.mm, mf.size, base, lo, hi)
        narrowed = bad_records(mf.mm, mf.size, base, start, end)
        if not narrowed:
            self.damage.report(base + start, base + end, what)
            return
        for a, b, reason in narrowed:
            self.damage.report(base + a, base + b, f"{what}: {reason}")

    def _check_records(self, mf: MappedFile, pos: int, budget: int) -> int:
        begin = pos
        end = min(mf.size, pos + budget)
        base = mf.start_offset
        while pos < end:
            v = check_record(mf.mm, pos, mf.size, base + pos, check_text=False)
            if isinstance(v, DispatchRequest):
                pos += v.size
                continue
            assert isinstance(v, Verdict)
            if v.reason == BLANK:
                return mf.size - begin  # the rest of the segment is its blank end
            nxt = next_sound_record(mf.mm, pos + 1, mf.size, base)
            stop = mf.size if nxt is None else nxt
            self._report(mf, pos, stop, f"scrub: {v.reason}")
            pos = stop
        return pos - begin

    def _digest_after_walk(self, mf: MappedFile) -> None:
        """A whole walk of ``mf`` found every record sound: digest it, unless something in
        it is registered as damaged (the digest would make the damage look right)."""
        start = mf.start_offset
        if not self._clean_walk.pop(start, False) or mf.flushed < mf.size or self.digests.has(start):
            return
        if self.damage.overlapping(start, mf.end_offset) is not None:
            return
        self.digests.write(start, mf.mm)
        self._check_first.add(start)
        self.digests_after_walk += 1
        log.info("scrub: every record of commit-log segment %s checks out; wrote its digest", mf.path.name)

    def _report(self, mf: MappedFile, lo: int, hi: int, reason: str) -> None:
        self._clean_walk[mf.start_offset] = False
        start, end = records_around(mf.mm, mf.size, mf.start_offset, lo, hi)
        self.damage.report(mf.start_offset + start, mf.start_offset + end, reason)
