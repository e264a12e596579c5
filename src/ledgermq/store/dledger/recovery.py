"""Recovery of a DLedger store: make data and index hold exactly the entries that were
completely written, in order, and refuse to start if that loses a committed entry.

The data files are the truth; the index is derived from them. Passes, in order:

1. Both file lists must be gap-free (DLedger's checkSelf): a missing file in the middle
   means lost entries that no later check could see. The first data file must start where
   retention left the log (the ``logstart`` record, written before retention unlinks a
   file): one that starts later means files were lost, not deleted.
2. Pick where the continuous validation starts (the *tail*): the data file
   ``recover_last_files`` from the end (3, as DLedger), or earlier the file holding the
   checkpoint's committed entry (what follows it may not have been fsynced when the
   process died), stepping back while that file's first entry is not sound or its index
   unit disagrees. Earlier files were complete (closed by a blank) and flushed before the
   files after them were written to. With ``digests`` each earlier file that has no
   digest, or has damage a read or the scrub recorded (``damagedRanges``), is walked
   entry by entry now; those a digest vouches for are left to the scrub
   (store/dledger/scrub.py). Without ``digests`` earlier files are trusted, as DLedger does.
3. Scan the tail forward, read-only: magic, size, body length, pos field == actual position, body
   CRC (when one was recorded), index continuity and non-decreasing terms, and whether
   each entry's index unit agrees. The scan stops at the end of data, a torn entry
   (zero-filled or partly written pages) or anything corrupt.
4. Compare with the committed index in the checkpoint *before touching any file*: if the
   scan ended below it, a committed entry is gone (or damaged), and truncating would make
   this node forget it silently; start-up is refused with the numbers and file names.
5. Cut the data after the last valid entry (the tail is zeroed, so a stale entry can
   never reappear behind a later append).
6. Rewrite index units from the first one that disagreed, and cut the index after the
   last entry.
7. fdatasync what recovery kept or rewrote, so "everything recovered is durable" holds
   and ``flush`` can count from the recovered end.

Damage versus a torn tail. A crash tears only the tail: nothing valid follows the first bad
entry. Rot in the middle (flipped bytes, valid entries after it), a missing data file (a
hole, or a lost first file), damage recorded by a read or the scrub, or a cut below the
committed index are damage. With ``repair_damage`` (a broker's
Raft member) recovery then records a repair marker *before* touching anything (the last
index the log held, and its term: what the member may have acknowledged), lowers the
checkpoint's committed index below the first lost entry, and cuts there like a torn tail;
the Raft core then keeps the member from acting as if it held what it lost, and the leader
re-sends it. A log whose first entry is lost is emptied and starts again at index 0 where
index 0 was written (``dataBeginPos``): Raft refills a log only at its end. Without
``repair_damage`` damage stops start-up as before (a bare store has no one to repair it
from), except rot above the committed index, which is cut (loudly).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from ledgermq.errors import StoreError
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dledger.config import DLedgerStoreConfig
from ledgermq.store.dledger.entry import (
    BLANK_HEAD,
    BLANK_MAGIC,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    INDEX_UNIT,
    INDEX_UNIT_SIZE,
    EntryInfo,
    Verdict,
    VerdictKind,
    check_entry,
)
from ledgermq.store.dledger.metadata import (
    CHECKPOINT_FILE,
    LedgerCheckpoint,
    LogStart,
    RepairMarker,
    load_repair,
    save_checkpoint,
    save_repair,
)
from ledgermq.store.dledger.sealed_walk import EarlyFiles, FileWalk, check_early_files
from ledgermq.store.dledger.segments import index_file_for, read_index_unit, sync_file
from ledgermq.store.mapped_file import MappedFile, segment_name
from ledgermq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)


class DLedgerRecoveryError(StoreError):
    """The files cannot be recovered without losing something that must not be lost."""


class CommittedEntryLostError(DLedgerRecoveryError):
    """The data ends (or breaks) below the committed index the checkpoint recorded."""


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    first_index: int  # 0 for an empty log
    last_index: int  # -1 for an empty log
    last_term: int  # -1 for an empty log
    scan_start: int  # data position validation started at
    valid_end: int  # data position just after the last valid entry
    entries_scanned: int
    index_rebuilt_from: int | None  # first index whose unit was rewritten, if any
    dirty_tail: bool  # non-zero bytes followed the valid end (a torn or corrupt entry)
    data_files_dropped: int
    stop_reason: str
    committed_index: int  # from the checkpoint (lowered below a damaged range); -1 without one
    damage: RepairMarker | None = None  # what the member must regain from its group, if anything
    damage_found: bool = False  # this recovery found new damage (not only a marker from before)
    files_walked: int = 0  # data files before the tail checked entry by entry (no digest, or recorded damage)
    files_left_to_scrub: int = 0  # data files before the tail a digest vouched for: the scrub checks them


@dataclass(slots=True)
class _Scan:
    first_index: int = 0
    last_index: int = -1
    last_term: int = -1
    valid_end: int = 0
    scanned: int = 0
    rebuild_index: int | None = None
    rebuild_pos: int = 0
    stop_reason: str = "end of data"
    recorded: bool = False  # stopped at damage a read or the scrub recorded


def recover(
    config: DLedgerStoreConfig,
    data: MappedFileQueue,
    index: MappedFileQueue,
    checkpoint: LedgerCheckpoint | None,
    *,
    log_start: LogStart | None = None,
    digests: SegmentDigests | None = None,
    damage: DamageRegistry | None = None,
) -> RecoveryResult:
    """Run the passes of the module docstring; see ``_Recovery``."""
    return _Recovery(config, data, index, checkpoint, digests, damage).run(log_start)


@dataclass(frozen=True, slots=True)
class _Usable:
    """Step 1's answer: the data files validation may use, and why the others cannot be."""

    all_files: list[MappedFile]
    files: list[MappedFile]  # up to a hole, or none when the log's first file is lost
    hole: MappedFile | None  # the first data file that does not follow the one before it
    lost_head: str | None  # why the first data file is not where the log begins


class _Recovery:
    """One recovery of one store, as a method per pass: what is read-only (steps 1-3)
    stays apart from what decides (3b, 4) and from what changes files (5-7), so no file is
    touched before the refusal in step 4 had its say."""

    def __init__(
        self,
        config: DLedgerStoreConfig,
        data: MappedFileQueue,
        index: MappedFileQueue,
        checkpoint: LedgerCheckpoint | None,
        digests: SegmentDigests | None,
        damage: DamageRegistry | None,
    ) -> None:
        self.config = config
        self.data = data
        self.index = index
        self.checkpoint = checkpoint
        self.digests = digests
        self.damage = damage
        # Lowered below a damaged range when the member repairs (step 3b).
        self.committed = checkpoint.committed_index if checkpoint is not None else -1

    def run(self, log_start: LogStart | None) -> RecoveryResult:
        usable = self._usable_files(log_start)
        scan, scan_start, early = self._validate(usable)
        damaged, marker = self._judge_damage(scan, usable)
        self._refuse_if_committed_lost(scan, damaged)
        dirty, dropped = self._cut(scan, usable.all_files)
        self._make_durable(scan, scan_start)
        return RecoveryResult(
            first_index=scan.first_index,
            last_index=scan.last_index,
            last_term=scan.last_term,
            scan_start=scan_start,
            valid_end=scan.valid_end,
            entries_scanned=scan.scanned,
            index_rebuilt_from=scan.rebuild_index,
            dirty_tail=dirty,
            data_files_dropped=dropped,
            stop_reason=scan.stop_reason,
            committed_index=self.committed,
            damage=marker,
            damage_found=damaged and self.config.repair_damage,
            files_walked=early.walked,
            files_left_to_scrub=early.left_to_scrub,
        )

    def _usable_files(self, log_start: LogStart | None) -> _Usable:
        """1. No holes in either file list (with repair_damage, a data hole is damage to
        repair and an index hole is rebuilt: the index derives from the data), and the
        first data file where retention left the log."""
        data, index, repair = self.data, self.index, self.config.repair_damage
        hole = _hole(data)
        if hole is not None and not repair:
            _check_contiguous(data, "data")
        if _hole(index) is not None:
            if not repair:
                _check_contiguous(index, "index")
            bad = _hole(index)
            assert bad is not None
            log.error("dledger recovery: index file %s is missing; rebuilding the index from there", bad.path.name)
            index.truncate_after(index.files[index.files.index(bad) - 1].end_offset)
        if repair:
            _drop_index_missing_its_head(data, index)
        all_files = data.files
        files = all_files if hole is None else all_files[: all_files.index(hole)]
        lost_head = _lost_head(all_files, log_start)
        if lost_head is not None:
            if not repair:
                raise DLedgerRecoveryError(f"{lost_head}; refusing to start")
            files = []  # nothing before the missing file is left, and Raft refills a log only at its end
        return _Usable(all_files, files, hole, lost_head)

    def _validate(self, usable: _Usable) -> tuple[_Scan, int, EarlyFiles]:
        """2-3. Where the tail starts; earlier files are walked now unless a digest vouches
        for them; then the tail is scanned (read-only). Returns the scan, the data position
        validation started at, and what the early files showed."""
        config, files = self.config, usable.files
        start = _tail_start(files, self.index, config, self.committed) if files else 0
        scan_start = files[start].start_offset if files else config.first_data_offset
        early = check_early_files(files[:start], self.digests, self.damage, config.check_body_crc)
        if early.stop is not None:
            scan = _stop_scan(files, early.stop)
            scan_start = min(scan_start, next(mf.start_offset for mf in files if mf.end_offset > scan.valid_end))
        elif files:
            scan = _scan(files, start, self.index, config.check_body_crc, self.damage)
        else:
            scan = _Scan(valid_end=scan_start)
        if usable.hole is not None and early.stop is None:
            scan.stop_reason = (
                f"data file {usable.hole.path.name} follows a missing one (a hole in {self.data.directory})"
            )
        if usable.lost_head is not None:
            scan.stop_reason = usable.lost_head
        if files and scan.valid_end <= files[0].start_offset and scan.valid_end != config.first_data_offset:
            # Nothing before the damage is left: the log starts again at index 0, where it began.
            scan = _Scan(valid_end=config.first_data_offset, stop_reason=scan.stop_reason, recorded=scan.recorded)
            scan_start = min(scan_start, config.first_data_offset)
        return scan, scan_start, early

    def _judge_damage(self, scan: _Scan, usable: _Usable) -> tuple[bool, RepairMarker | None]:
        """3b. Rot in the middle, a hole, a lost first file, damage a read or the scrub
        recorded, or a committed entry cut: damage, not a torn tail. A repairing member
        records what it must regain (before anything is cut); a bare store only says
        what valid entries it cuts. Returns (damaged, the repair marker in force)."""
        config = self.config
        after = _last_valid_after(
            usable.all_files, self.index, scan.last_index + 1, scan.valid_end, config.check_body_crc
        )
        previous = load_repair(config.default_path) if config.repair_damage else None
        damaged = (
            after is not None
            or usable.hole is not None
            or usable.lost_head is not None
            or scan.recorded
            or self.committed > scan.last_index
        )
        if damaged and config.repair_damage:
            return True, self._mark_for_repair(scan, after, previous)
        if after is not None:
            log.error(
                "dledger recovery: valid entries (up to index %d) follow damage at index %d (data position %d: %s); "
                "they are cut with it",
                after[0],
                scan.last_index + 1,
                scan.valid_end,
                scan.stop_reason,
            )
        return damaged, previous

    def _mark_for_repair(
        self, scan: _Scan, after: tuple[int, int] | None, previous: RepairMarker | None
    ) -> RepairMarker:
        """Save the repair marker: the highest index the log may have held (and so
        acknowledged), with its term when known; lower the committed index below the cut."""
        config, checkpoint, committed = self.config, self.checkpoint, self.committed
        end = checkpoint.end_index if checkpoint is not None else -1
        held = scan.last_index + 1 if scan.recorded else scan.last_index  # the damaged entry was held
        until = max(committed, end, after[0] if after is not None else -1, held)
        last_term = after[1] if after is not None and after[0] == until else -1
        if previous is not None:
            until = max(until, previous.until)
            last_term = max(last_term, previous.last_term) if last_term >= 0 else -1
        marker = RepairMarker(until, last_term, scan.last_index + 1)
        log.error(
            "dledger recovery: the log in %s is damaged at index %d (data position %d: %s); entries up to "
            "index %d were held before. Cutting the log there and repairing it from the group's leader: "
            "until it holds index %d again this member neither campaigns, nor votes for a shorter log, "
            "nor counts toward a quorum",
            config.data_dir,
            scan.last_index + 1,
            scan.valid_end,
            scan.stop_reason,
            until,
            until,
        )
        save_repair(config.default_path, marker)  # before anything is cut
        if committed > scan.last_index:
            self.committed = scan.last_index
            save_checkpoint(config.default_path, LedgerCheckpoint(scan.last_index, self.committed))
        return marker

    def _refuse_if_committed_lost(self, scan: _Scan, damaged: bool) -> None:
        """4. Refuse before changing anything if a committed entry would be dropped."""
        config, checkpoint = self.config, self.checkpoint
        if self.committed > scan.last_index:
            raise CommittedEntryLostError(
                f"{config.default_path / CHECKPOINT_FILE} says committedIndex={self.committed}, but the entries in "
                f"{config.data_dir} end at index {scan.last_index} (data position {scan.valid_end}: "
                f"{scan.stop_reason}). A committed entry is missing or damaged; refusing to start rather than "
                f"truncate it away. Restore the data files, or move {config.default_path} aside and let this "
                f"node catch up from its peers."
            )
        if checkpoint is not None and checkpoint.end_index > scan.last_index and not damaged:
            log.warning(
                "dledger recovery: checkpoint endIndex=%d but entries end at %d (uncommitted tail lost: %s)",
                checkpoint.end_index,
                scan.last_index,
                scan.stop_reason,
            )

    def _cut(self, scan: _Scan, files: list[MappedFile]) -> tuple[bool, int]:
        """5-6. Cut the data after the last valid entry; make the index units agree with
        the data, and end with it. Returns (non-zero bytes followed the end, files dropped)."""
        data, index = self.data, self.index
        dirty = _dirty_after(data, scan.valid_end)
        dropped = sum(
            1
            for i, mf in enumerate(files)
            if mf.start_offset > scan.valid_end or (i > 0 and mf.start_offset == scan.valid_end)
        )
        if files:
            data.truncate_after(scan.valid_end)
        if scan.stop_reason != "end of data" or dirty:
            log.warning(
                "dledger recovery: data cut at %d after index %d: %s", scan.valid_end, scan.last_index, scan.stop_reason
            )
        if scan.rebuild_index is not None:
            _rebuild_index(data, index, scan.rebuild_index, scan.rebuild_pos, scan.last_index)
        index.truncate_after((scan.last_index + 1) * INDEX_UNIT_SIZE)
        return dirty, dropped

    def _make_durable(self, scan: _Scan, scan_start: int) -> None:
        """7. fdatasync what recovery kept or rewrote; forget digests and recorded damage
        of bytes that were cut (refilled, they change) or are no longer in the log."""
        data, index = self.data, self.index
        index_from = min(scan.rebuild_index if scan.rebuild_index is not None else scan.last_index, scan.last_index)
        touched = [mf for mf in data.files if mf.end_offset > scan_start]
        touched += [mf for mf in index.files if mf.end_offset > index_from * INDEX_UNIT_SIZE]
        for mf in touched:
            sync_file(mf)
            mf.flushed = mf.wrote
        first = data.first()
        if self.digests is not None:
            self.digests.forget_from(scan.valid_end)
            if first is not None:
                self.digests.forget_before(first.start_offset)
        if self.damage is not None:
            self.damage.drop_from(scan.valid_end)
            if first is not None:
                self.damage.drop_before(first.start_offset)


def _stop_scan(files: list[MappedFile], stop: FileWalk) -> _Scan:
    """The scan result when an early file's walk met damage: the log ends at the last
    sound entry before it."""
    assert stop.bad_pos is not None
    head = check_entry(files[0].mm, 0, files[0].size, files[0].start_offset, check_crc=False)
    return _Scan(
        first_index=head.index if isinstance(head, EntryInfo) else 0,
        last_index=stop.last.index if stop.last is not None else -1,
        last_term=stop.last.term if stop.last is not None else -1,
        valid_end=stop.bad_pos,
        scanned=stop.entries,
        stop_reason=stop.reason,
        recorded=stop.recorded,
    )


def _lost_head(files: list[MappedFile], log_start: LogStart | None) -> str | None:
    """Why the first data file is not where retention left the log's beginning, if it is not."""
    if log_start is None or not files or files[0].start_offset <= log_start.first_pos:
        return None
    return (
        f"data file {segment_name(log_start.first_pos)} (the log's beginning at index {log_start.first_index}, "
        f"where retention left it) is missing: the first data file is {files[0].path.name}"
    )


def _drop_index_missing_its_head(data: MappedFileQueue, index: MappedFileQueue) -> None:
    """The index must begin at or below the unit of the log's first entry (retention deletes
    an index file only once every unit in it is below that entry). One that begins above it
    lost its first file(s), and the entries there would be unreadable though held: the whole
    index goes, and the scan rebuilds it from the data (every unit then disagrees)."""
    first = data.first()
    if first is None or not index.files:
        return
    head = check_entry(first.mm, 0, first.size, first.start_offset, check_crc=False)
    if not isinstance(head, EntryInfo) or index.files[0].start_offset <= head.index * INDEX_UNIT_SIZE:
        return
    log.error(
        "dledger recovery: the index file holding index %d (the log's first entry) is missing: the first index "
        "file is %s; rebuilding the index from the data",
        head.index,
        index.files[0].path.name,
    )
    index.truncate_after(0)


def _tail_start(files: list[MappedFile], index: MappedFileQueue, config: DLedgerStoreConfig, committed: int) -> int:
    """The first file of the tail: the last ``recover_last_files``, and (with digests) every
    file from the one holding the checkpoint's committed entry on: what followed it may not
    have been fsynced when the process died, so no digest or earlier check vouches for it."""
    tail = _scan_start(files, index, config.recover_last_files, config.check_body_crc)
    if not config.digests or config.recover_last_files == 0:
        return tail
    unit = read_index_unit(index, committed) if committed >= 0 else None
    if unit is None or unit[0] != ENTRY_MAGIC or unit[3] != committed:
        return _scan_start(files, index, 0, config.check_body_crc)  # unknown: everything is the tail
    holder = next((i for i, mf in enumerate(files) if mf.start_offset <= unit[1] < mf.end_offset), 0)
    return min(tail, _scan_start(files, index, len(files) - holder, config.check_body_crc))


def _hole(queue: MappedFileQueue) -> MappedFile | None:
    """The first file that does not follow the one before it."""
    for prev, cur in itertools.pairwise(queue.files):
        if cur.start_offset != prev.end_offset:
            return cur
    return None


def _last_valid_after(
    files: list[MappedFile], index: MappedFileQueue, from_index: int, from_pos: int, check_crc: bool
) -> tuple[int, int] | None:
    """The last valid entry (index, term) at or after ``from_index`` beyond data position
    ``from_pos``, if any: then the scan stopped at damage, not at a torn tail.

    Two witnesses, since either may be damaged too: the index units (walked back from the
    last one written) and the entry each later data file starts with (walked to its end).
    """
    best: tuple[int, int] | None = None
    for mf in reversed(files):
        if mf.start_offset <= from_pos:
            break
        head = check_entry(mf.mm, 0, mf.size, mf.start_offset, check_crc=check_crc)
        if isinstance(head, EntryInfo) and head.index >= from_index:
            at, last = head.size, head
            while True:
                v = check_entry(mf.mm, at, mf.size, mf.start_offset + at, check_crc=check_crc)
                if not isinstance(v, EntryInfo) or v.index != last.index + 1:
                    break
                at, last = at + v.size, v
            best = (last.index, last.term)
            break
    unit = _last_unit(index)
    checked = 0
    while unit >= max(from_index, best[0] + 1 if best else 0) and checked < 4096:
        checked += 1
        u = read_index_unit(index, unit)
        if u is not None and u[0] == ENTRY_MAGIC and u[3] == unit and u[1] >= from_pos:
            holder = next((f for f in files if f.start_offset <= u[1] < f.end_offset), None)
            if holder is not None:
                v = check_entry(holder.mm, u[1] - holder.start_offset, holder.size, u[1], check_crc=check_crc)
                if isinstance(v, EntryInfo) and v.index == unit:
                    return (v.index, v.term) if best is None or v.index > best[0] else best
        unit -= 1
    return best


def _last_unit(index: MappedFileQueue) -> int:
    """The highest entry index whose unit holds anything but zeros (-1 if none)."""
    for mf in reversed(index.files):
        mm, end = mf.mm, mf.size
        while end > 0:
            lo = max(0, end - (1 << 20))
            chunk = mm[lo:end].rstrip(b"\x00")
            if chunk:
                return (mf.start_offset + lo + len(chunk) - 1) // INDEX_UNIT_SIZE
            end = lo
    return -1


def _check_contiguous(queue: MappedFileQueue, what: str) -> None:
    files = queue.files
    for prev, cur in itertools.pairwise(files):
        if cur.start_offset != prev.end_offset:
            raise DLedgerRecoveryError(
                f"{what} files in {queue.directory} have a hole: {cur.path.name} does not follow "
                f"{prev.path.name}; refusing to start"
            )


def _unit_agrees(index: MappedFileQueue, entry: EntryInfo) -> bool:
    return read_index_unit(index, entry.index) == (ENTRY_MAGIC, entry.pos, entry.size, entry.index, entry.term)


def _scan_start(files: list[MappedFile], index: MappedFileQueue, last_files: int, check_crc: bool) -> int:
    """The first file to validate: recent enough to be cheap, early enough to be sound."""
    i = 0 if last_files == 0 else max(0, len(files) - last_files)
    while i > 0:
        mf = files[i]
        head = check_entry(mf.mm, 0, mf.size, mf.start_offset, check_crc=check_crc)
        if isinstance(head, EntryInfo) and _unit_agrees(index, head):
            return i
        i -= 1
    return 0


def _scan(
    files: list[MappedFile], start: int, index: MappedFileQueue, check_crc: bool, damage: DamageRegistry | None = None
) -> _Scan:
    s = _Scan(valid_end=files[start].start_offset)
    first = check_entry(files[0].mm, 0, files[0].size, files[0].start_offset, check_crc=False)
    if isinstance(first, EntryInfo):
        s.first_index = first.index
    elif start > 0:
        raise DLedgerRecoveryError(f"{files[0].path}: the first data file does not start with an entry")
    expected: int | None = None
    if start > 0:
        head = check_entry(files[start].mm, 0, files[start].size, files[start].start_offset, check_crc=False)
        assert isinstance(head, EntryInfo)  # _scan_start only stops at a file with a sound head
        expected = head.index
        unit = read_index_unit(index, head.index - 1)
        s.last_index, s.last_term = head.index - 1, (unit[4] if unit is not None else -1)
    for mf in files[start:]:
        at = 0
        while True:
            v = check_entry(mf.mm, at, mf.size, mf.start_offset + at, check_crc=check_crc)
            hit = None
            if damage is not None and not (isinstance(v, Verdict) and v.kind is VerdictKind.END_OF_DATA):
                end = v.end if isinstance(v, EntryInfo) else mf.end_offset
                hit = damage.overlapping(mf.start_offset + at, end)
            if hit is not None:
                s.stop_reason = f"data [{hit[0]}, {hit[1]}) was found damaged ({hit[2]})"
                s.recorded = True
                return s
            if isinstance(v, EntryInfo):
                if expected is not None and v.index != expected:
                    s.stop_reason = f"index {v.index} at {v.pos} follows index {expected - 1}"
                    return s
                if v.term < s.last_term:
                    s.stop_reason = f"term {v.term} of index {v.index} is below the previous term {s.last_term}"
                    return s
                if expected is None:
                    s.first_index = v.index
                if s.rebuild_index is None and not _unit_agrees(index, v):
                    s.rebuild_index, s.rebuild_pos = v.index, v.pos
                s.scanned += 1
                s.last_index, s.last_term, expected = v.index, v.term, v.index + 1
                at += v.size
                s.valid_end = mf.start_offset + at
                continue
            assert isinstance(v, Verdict)
            if v.kind is VerdictKind.BLANK:
                s.valid_end = mf.end_offset
                break  # the next file continues
            s.stop_reason = v.reason
            return s
    return s


def _rebuild_index(data: MappedFileQueue, index: MappedFileQueue, from_index: int, pos: int, last: int) -> None:
    """Rewrite units ``from_index..last`` from the entry heads (already validated)."""
    log.warning("dledger recovery: rebuilding index units from index %d", from_index)
    index.truncate_after(from_index * INDEX_UNIT_SIZE)
    unit = bytearray(INDEX_UNIT_SIZE)
    i = from_index
    while i <= last:
        mf = data.find(pos)
        assert mf is not None
        at = pos - mf.start_offset
        if BLANK_HEAD.unpack_from(mf.mm, at)[0] == BLANK_MAGIC:  # closes this file: the next goes on
            pos = mf.end_offset
            continue
        magic, size, idx, term, epos, *_rest = ENTRY_HEAD.unpack_from(mf.mm, at)
        assert magic == ENTRY_MAGIC and idx == i and epos == pos, (magic, idx, i, epos, pos)
        INDEX_UNIT.pack_into(unit, 0, ENTRY_MAGIC, pos, size, idx, term)
        index_file_for(index, i * INDEX_UNIT_SIZE).append(unit)
        pos += size
        i += 1


def _dirty_after(data: MappedFileQueue, pos: int) -> bool:
    """Did anything but zeros follow the valid end (a torn or corrupt entry)?"""
    mf = data.find(pos)
    if mf is None:
        return False
    at = pos - mf.start_offset
    return bool(mf.mm[at : min(at + 4096, mf.size)].strip(b"\x00"))
