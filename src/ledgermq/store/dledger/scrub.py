"""The DLedger member's integrity thread: digests of sealed data files, and the scrub.

Recovery walks at start only what a crash may have left unverified (the last files, the
one holding the committed entry and after) and every earlier file without a digest; a
digest vouches for the rest. This thread keeps that promise:

* **Digests.** A data file that is sealed (closed by a blank, a later file exists),
  flushed, and whose entries are all committed in the checkpoint (so no truncation can
  change it any more) is walked entry by entry (structure, positions, index continuity,
  body CRCs) and then digested: one CRC32 per 64 KiB block, in
  ``dledger-<id>/digests/<file name>.crc`` (store/digests.py's format, outside the data
  directory). Files of the first start with this version get theirs here too.
* **Scrub.** Sealed files with a digest are re-read block by block at most
  ``storeScrubBytesPerSecond`` (digest work counts toward it), a full pass at most every
  ``storeScrubIntervalSeconds`` (``storeScrubEnable=false`` keeps the digests, drops the
  re-reads): any flipped byte shows as a block whose CRC differs.

What fails is recorded in the store's damaged ranges (``dledger-<id>/damagedRanges``:
never served, and where the next recovery cuts the log), then handed to the commit log's
``on_corrupt`` hook, the same path as damage a read finds: the broker fail-stops the Raft
driver, re-recovers the store (which cuts the log at the damage) and the member repairs as
a follower from the leader. A failing step is logged and counted by ``ServiceThread``; the
loop goes on.

Concurrency: each step holds the commit log's ``files_lock``, which retention's deletions
and ``reopen_ledger`` also take, so the files it reads are neither deleted nor swapped
under it; appends and the Raft driver never wait for it.
"""

from __future__ import annotations

import itertools
import logging

from ledgermq.clock import Clock
from ledgermq.errors import CorruptRangeError, StoreError
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.entry import EntryInfo, check_entry
from ledgermq.store.dledger.ledger_store import DLedgerStore
from ledgermq.store.dledger.sealed_walk import walk_sealed_file
from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.scrub import STEP_S, ScrubSettings
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

MAX_BUDGET = 64 * 1024 * 1024  # bytes a quiet thread may save up


class LedgerScrubService(ServiceThread):
    name = "dledger-scrub"

    def __init__(self, commitlog: DLedgerCommitLog, settings: ScrubSettings, clock: Clock) -> None:
        super().__init__(STEP_S)
        self.commitlog = commitlog
        self.settings = settings
        self.clock = clock
        self.scrubbed_bytes = 0
        self.digests_written = 0
        self.damage_found = 0
        self.passes = 0
        self.last_pass_ms = 0
        self._pass_started_ms = 0
        self._cursor: int | None = None  # the data position the scrub goes on from
        self._budget = 0.0

    # -- the loop --------------------------------------------------------------------
    def step(self) -> None:
        self._budget = min(self._budget + self.settings.bytes_per_second * STEP_S, MAX_BUDGET)
        found: CorruptRangeError | None = None
        with self.commitlog.files_lock:
            if self.commitlog.closed:
                return
            try:
                ledger = self.commitlog.ledger
            except StoreError:
                return  # not open yet, or being reopened
            digests = ledger.digests
            if digests is None:
                return
            found = self.write_digests(ledger, digests)
            if found is None and self.settings.enable:
                found = self.scrub_some(ledger, digests)
        if found is not None:
            self.damage_found += 1
            hook = self.commitlog.on_corrupt
            if hook is not None:
                hook(found)

    def write_digests(self, ledger: DLedgerStore, digests: SegmentDigests) -> CorruptRangeError | None:
        """Walk and digest sealed, flushed, committed files that have no digest yet, while
        the byte budget lasts; the first damage found, if any."""
        files = ledger.data.files
        for mf, nxt in itertools.pairwise(files):
            if self._budget <= 0 or self.stopping:
                return None
            if digests.has(mf.start_offset):
                continue
            head = _first_entry(nxt)
            if mf.wrote < mf.size or mf.flushed < mf.size or head is None or head.index > ledger.committed_index + 1:
                return None  # this file (and every later one) may still change
            if ledger.damage.overlapping(mf.start_offset, mf.end_offset) is not None:
                return None  # known damaged: the next recovery cuts the log there
            if not mf.pin():
                continue
            self._budget -= mf.size
            try:
                walk = walk_sealed_file(mf, ledger.config.check_body_crc, ledger.damage, None, -1)
                if walk.bad_pos is not None:
                    return self._report(ledger, walk.bad_pos, walk.bad_pos + 1, f"scrub: {walk.reason}")
                digests.write(mf.start_offset, mf.mm)
            except (SegmentGoneError, ValueError):
                continue  # deleted or closed meanwhile
            finally:
                mf.unpin()
            self.digests_written += 1
            log.info("wrote digest of sealed DLedger data file %s (%d entries verified)", mf.path.name, walk.entries)
        return None

    def scrub_some(self, ledger: DLedgerStore, digests: SegmentDigests) -> CorruptRangeError | None:
        """Check digested files block by block from where the last step stopped."""
        now = self.clock.wall_ms()
        if self._cursor is None:
            if self.passes and now - self._pass_started_ms < self.settings.interval_seconds * 1000:
                return None
            first = ledger.data.first()
            self._cursor = first.start_offset if first is not None else 0
            self._pass_started_ms = now
        while self._budget > 0 and not self.stopping:
            sealed = ledger.data.files[:-1]
            mf = next((f for f in sealed if f.end_offset > self._cursor), None)
            if mf is None:
                self._finish_pass(now)
                return None
            self._cursor = max(self._cursor, mf.start_offset)
            if digests.get(mf.start_offset) is None:
                self._cursor = mf.end_offset  # not digested yet: write_digests walks it first
                continue
            pos = self._cursor - mf.start_offset
            block = digests.block_size
            end = min(mf.size, pos + max(int(self._budget) // block * block, block))
            if not mf.pin():
                self._cursor = mf.end_offset
                continue
            try:
                bad = digests.bad_blocks(mf.start_offset, pos, mf.read(pos, end - pos)) or []
            except SegmentGoneError:
                bad = []
            finally:
                mf.unpin()
            self._budget -= end - pos
            self.scrubbed_bytes += end - pos
            self._cursor = mf.start_offset + end
            for lo, hi in bad:
                a, b = mf.start_offset + lo, mf.start_offset + hi
                found = self._report(ledger, a, b, f"scrub: digest block [{a}, {b}) of {mf.path.name} differs")
                if found is not None:
                    return found
        return None

    def _finish_pass(self, now: int) -> None:
        self._cursor = None
        self.passes += 1
        self.last_pass_ms = now
        log.info("dledger scrub pass %d done: %d bytes checked so far", self.passes, self.scrubbed_bytes)

    @staticmethod
    def _report(ledger: DLedgerStore, start: int, end: int, reason: str) -> CorruptRangeError | None:
        """Record the damage (never served from now on); the error to hand on if it is new."""
        if not ledger.damage.report(start, end, reason):
            return None
        return CorruptRangeError(start, end, reason)


def _first_entry(mf: MappedFile) -> EntryInfo | None:
    if not mf.pin():
        return None
    try:
        v = check_entry(mf.mm, 0, mf.wrote, mf.start_offset, capacity=mf.size, check_crc=False)
    except ValueError:
        return None
    finally:
        mf.unpin()
    return v if isinstance(v, EntryInfo) else None
