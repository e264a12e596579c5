"""DLedgerStore: the Raft log on disk in DLedger's layout (DLedgerMmapFileStore's files).

What a Raft driver needs and nothing more: append contiguous entries (leader or
follower), read them back by index, the terms, cut a divergent uncommitted tail, flush and
learn what is durable, and the two state files. The store has no Raft logic: it checks
only what keeps the files well-formed (contiguous indices, terms that never go down, no
cut below the checkpointed committed index).

Indices start at 0 as in DLedger; an empty log has ``last_index == -1`` and
``last_term == -1``. A Raft core with 1-based indices maps ``raft = dledger + 1`` (its
index 0 with term 0 is the position before the log).

Concurrency: one lock serialises appends, truncation and the bookkeeping of flushes
(fsyncs run outside it, so appends go on meanwhile; truncation waits for a running
flush); readers take no lock and only read entries up to the published ``last_index``. A reader
racing a truncation of the entries it reads gets an error, never other entries' bytes
passed off as its own (every read checks the index and position the entry names).
Nothing is kept per entry in Python: ``get`` reads the 32-byte index unit, then the entry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ledgermq.atomic_file import fsync_dir
from ledgermq.errors import StoreClosedError, StoreError
from ledgermq.failpoints import failpoint, is_armed
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dledger.append_runs import BodyPatch, EntryInput, write_runs
from ledgermq.store.dledger.config import DLedgerStoreConfig
from ledgermq.store.dledger.entry import (
    BODY_OFFSET,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    INDEX_UNIT_SIZE,
    EntryInfo,
    Verdict,
    VerdictKind,
    body_crc,
    check_entry,
    pack_entry_head,
    pack_index_unit,
)
from ledgermq.store.dledger.metadata import (
    LedgerCheckpoint,
    LogStart,
    RepairMarker,
    TermState,
    clear_repair,
    load_checkpoint,
    load_log_start,
    load_term_state,
    save_checkpoint,
    save_log_start,
    save_term_state,
)
from ledgermq.store.dledger.recovery import RecoveryResult, recover
from ledgermq.store.dledger.segments import (
    data_file_for,
    index_file_for,
    next_data_pos,
    read_data,
    read_index_unit,
    sync_file,
)
from ledgermq.store.dledger.short_files import pad_short_data_files, pad_short_index_files
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)


# Whether a leading data file may go, given the first entry of the file after it.
FileCondition = Callable[[MappedFile, EntryInfo], bool]


class EntryNotFoundError(StoreError, IndexError):
    """The index is outside ``[first_index, last_index]`` or its entry is unreadable."""


class CorruptEntryError(EntryNotFoundError):
    """An entry failed its checks when read (rot since recovery verified it): never returned.
    The member must re-recover (which cuts the log there and repairs it from its group)."""

    def __init__(self, index: int, pos: int, size: int, reason: str) -> None:
        super().__init__(f"DLedger entry {index} at data position {pos} ({size} bytes) is corrupt: {reason}")
        self.index = index
        self.pos = pos
        self.size = size
        self.reason = reason


class LogMismatchError(StoreError, ValueError):
    """An append or truncation would break the log's shape (gap, falling term, committed cut)."""


class StoredEntry(NamedTuple):
    term: int
    body: bytes
    pos: int  # where the entry starts; its body starts at pos + BODY_OFFSET


@dataclass(frozen=True, slots=True)
class EntrySpan:
    """One entry as ``entries_from`` walks the data (no body copied)."""

    index: int
    term: int
    pos: int
    body_pos: int
    body_size: int
    next_pos: int  # where the walk goes on (a blank is skipped when reached)


TORN_ENTRY_POINT = "dledger.after_entry_head"
"""The failpoint between an entry's head and its body (a torn entry); while it is armed,
appends go entry by entry so it can fire there."""

RECENT_SPANS = 4096
"""Entries whose (pos, size) ``entry_span`` answers from memory (the last appended)."""


class DLedgerStore:
    def __init__(self, config: DLedgerStoreConfig) -> None:
        """Use ``DLedgerStore.open``: it loads and recovers the files."""
        self.config = config
        self.data = MappedFileQueue(config.data_dir, config.data_file_size)
        self.index = MappedFileQueue(config.index_dir, config.index_file_size)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time; truncation waits for it
        self._checkpoint_lock = threading.Lock()  # checkpoint writes land in the order decided
        self._head = bytearray(BODY_OFFSET)  # an entry head is packed here, then copied in
        self._unit = bytearray(INDEX_UNIT_SIZE)
        self._spans: dict[int, tuple[int, int]] = {}
        """(pos, size) of the last ``RECENT_SPANS`` entries appended: a leader answers each
        send with its entry's position just after appending it, and reading the index unit
        back for it cost a file lookup, a pin and an unpack per message."""
        self._first_index = 0
        self._last_index = -1
        self._last_term = -1
        self._persisted_index = -1
        self._committed_index = -1
        self._closed = False
        self.term_state = TermState()
        self.recovery: RecoveryResult | None = None
        self.repair: RepairMarker | None = None
        """Set while the log is being repaired from the group (see recovery.py); ``end_repair``
        clears it once the Raft member holds everything it lost again."""
        self.corrupt_reads = 0
        """Entries a read found corrupt since the store opened (never returned)."""
        self.repairs_completed = 0
        """Repairs this store saw end (``end_repair``) since it opened."""
        self.digests: SegmentDigests | None = (
            SegmentDigests(config.digest_dir, config.data_file_size) if config.digests else None
        )
        """Per-block CRCs of sealed data files (``config.digests``): written and checked by the
        scrub, trusted by recovery (store/dledger/scrub.py)."""
        self.damage = DamageRegistry(config.damage_path)
        """Data ranges a read or the scrub found damaged, kept until recovery cuts them."""
        self.log_start: LogStart | None = None

    @classmethod
    def open(cls, config: DLedgerStoreConfig) -> DLedgerStore:
        """Load the files, recover them (see recovery.py) and read the state files.

        Raises CommittedEntryLostError, DLedgerRecoveryError or MetadataError (each names
        the file) rather than start with less than was promised.
        """
        store = cls(config)
        try:
            checkpoint = load_checkpoint(config.default_path)
            store.term_state = load_term_state(config.default_path)
            log_start = load_log_start(config.default_path)
            store.damage.load()
            index_lost_from = None
            if config.repair_damage:
                pad_short_data_files(config, store.damage)
                index_lost_from = pad_short_index_files(config)
            store.data.load()
            store.index.load()
            if index_lost_from is not None:
                store.index.truncate_after(index_lost_from)  # recovery rebuilds the units from the data
            result = recover(
                config,
                store.data,
                store.index,
                checkpoint,
                log_start=log_start,
                digests=store.digests,
                damage=store.damage,
            )
            store.log_start = _note_log_start(config, store.data, result, log_start)
        except BaseException:
            store.data.close()
            store.index.close()
            raise
        store.recovery = result
        store.repair = result.damage
        store._first_index = result.first_index
        store._last_index = store._persisted_index = result.last_index
        store._last_term = result.last_term
        store._committed_index = result.committed_index
        return store

    # -- positions -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Closed: its files are unmapped, and every read of them finds nothing."""
        return self._closed

    @property
    def first_index(self) -> int:
        return self._first_index

    @property
    def last_index(self) -> int:
        return self._last_index

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def persisted_index(self) -> int:
        """The last index whose entry (and index unit) a completed flush covered."""
        return self._persisted_index

    @property
    def committed_index(self) -> int:
        """The committed index last written to the checkpoint file (-1: none)."""
        return self._committed_index

    @property
    def end_pos(self) -> int:
        """The data position after the last entry (DLedger's max wrote position)."""
        return self.data.max_offset() if not self.data.empty else self.config.first_data_offset

    def next_entry_pos(self, body_size: int) -> int:
        """Where the next entry starts if its body is ``body_size`` bytes (after any roll).

        Valid until the next append or truncation; a caller that must not race other
        writers uses ``append_with_pos`` instead, which decides under the store's lock.
        """
        self._check_body_size(body_size)
        return next_data_pos(self.data, BODY_OFFSET + body_size, self.config.first_data_offset)

    # -- appends ---------------------------------------------------------------------
    def append(self, entries: Sequence[EntryInput]) -> list[int]:
        """Append entries whose indices continue the log; return each entry's position."""
        return self._append(entries, None)

    def append_with_pos(self, entries: Sequence[tuple[int, int, bytearray]], patch: BodyPatch) -> list[int]:
        """Like ``append``, but ``patch(body, body_pos)`` runs for each entry once its place is
        decided and before it is encoded (under the store lock: keep it short, and do not
        call the store from it). The body CRC covers the patched body."""
        return self._append(entries, patch)

    def _append(self, entries: Sequence[EntryInput], patch: BodyPatch | None) -> list[int]:
        with self._lock:
            if self._closed:
                raise StoreClosedError("the DLedger store is closed")
            expected, term_floor = self._last_index + 1, self._last_term
            for index, term, body in entries:  # all or nothing for the caller's mistakes
                if index != expected:
                    raise LogMismatchError(f"append of index {index}, but the log continues at {expected}")
                if term < term_floor:
                    raise LogMismatchError(f"index {index} has term {term} below the previous term {term_floor}")
                self._check_body_size(len(body))
                expected, term_floor = expected + 1, term
            if len(entries) > 1 and not is_armed(TORN_ENTRY_POINT):
                return self._append_runs(entries, patch)
            positions: list[int] = []
            first_offset = self.config.first_data_offset
            spans = self._spans
            for index, term, body in entries:
                size = BODY_OFFSET + len(body)
                mf = data_file_for(self.data, size, first_offset)
                pos = mf.write_offset
                if patch is not None:
                    assert isinstance(body, bytearray)
                    patch(body, pos + BODY_OFFSET)
                pack_entry_head(self._head, 0, index, term, pos, body)
                mf.append(self._head)
                failpoint(TORN_ENTRY_POINT)
                mf.append(body)
                pack_index_unit(self._unit, 0, pos, size, index, term)
                index_file_for(self.index, index * INDEX_UNIT_SIZE).append(self._unit)
                self._last_index, self._last_term = index, term
                spans[index] = (pos, size)
                spans.pop(index - RECENT_SPANS, None)
                positions.append(pos)
            return positions

    def _append_runs(self, entries: Sequence[EntryInput], patch: BodyPatch | None) -> list[int]:
        """``_append`` (under its lock, entries checked) of several entries a run per data
        file and index file (append_runs.py), published once written."""
        positions = write_runs(self.data, self.index, self.config.first_data_offset, entries, patch)
        spans = self._spans
        for (index, _term, body), pos in zip(entries, positions, strict=True):
            spans[index] = (pos, BODY_OFFSET + len(body))
            spans.pop(index - RECENT_SPANS, None)
        # Readers take no lock and trust ``last_index``: it moves once the bytes are in.
        self._last_index, self._last_term = entries[-1][0], entries[-1][1]
        return positions

    def _check_body_size(self, n: int) -> None:
        if n > self.config.max_body_size:
            raise LogMismatchError(
                f"a {n}-byte body does not fit a {self.config.data_file_size}-byte data file "
                f"(at most {self.config.max_body_size})"
            )

    # -- reads -----------------------------------------------------------------------
    def entry_span(self, index: int) -> tuple[int, int]:
        """(pos, size) of an entry from its index unit (DLedger's getEntryPosAndSize)."""
        self._check_index(index)
        span = self._spans.get(index)
        if span is not None:
            return span
        unit = read_index_unit(self.index, index)
        if unit is None or unit[0] != ENTRY_MAGIC or unit[3] != index:
            raise EntryNotFoundError(f"no index unit for index {index}")
        return unit[1], unit[2]

    def term_at(self, index: int) -> int:
        self._check_index(index)
        unit = read_index_unit(self.index, index)
        if unit is None or unit[0] != ENTRY_MAGIC or unit[3] != index:
            raise EntryNotFoundError(f"no index unit for index {index}")
        return unit[4]

    def get(self, index: int) -> StoredEntry:
        pos, size = self.entry_span(index)
        raw = read_data(self.data, pos, size)
        if raw is None:
            raise EntryNotFoundError(f"entry {index} at {pos} ({size} bytes) is not in the data files")
        magic, esize, eindex, term, epos, _ch, _chain, crc, body_len = ENTRY_HEAD.unpack_from(raw)
        if magic != ENTRY_MAGIC or esize != size or eindex != index or epos != pos:
            raise EntryNotFoundError(f"entry {index}: data at {pos} holds index {eindex} at {epos} (truncated?)")
        if body_len != size - BODY_OFFSET or (crc != 0 and body_crc(memoryview(raw)[BODY_OFFSET:]) != crc):
            self.corrupt_reads += 1
            reason = f"body length {body_len} or body CRC of entry {index} is wrong"
            self.damage.report(pos, pos + size, f"a read: {reason}")
            raise CorruptEntryError(index, pos, size, reason)
        hit = self.damage.overlapping(pos, pos + size)
        if hit is not None:
            raise CorruptEntryError(index, pos, size, f"data [{hit[0]}, {hit[1]}) was found damaged ({hit[2]})")
        return StoredEntry(term, raw[BODY_OFFSET:], pos)

    def read_body_at(self, pos: int, size: int) -> bytes | None:
        """``size`` bytes at data position ``pos`` (a consume-queue read of an inner message),
        or None if they are not all written (or their file was deleted)."""
        return read_data(self.data, pos, size)

    def entries_from(self, pos: int, max_index: int | None = None) -> Iterator[EntrySpan]:
        """Walk entries from data position ``pos`` (an entry start, a blank, or a file end)
        up to ``max_index`` (default: the last entry), skipping blanks.

        A reput keeps ``next_pos`` as its cursor and dispatches the inner message at
        ``body_pos`` (``body_size`` bytes); RocketMQ limits it to the committed index.
        Entries are not CRC-checked here: recovery did, and dispatch checks the message.
        """
        limit = self._last_index if max_index is None else min(max_index, self._last_index)
        while True:
            mf = self.data.find(pos)
            if mf is None:
                if self.data.empty or pos == self.end_pos:
                    return
                raise EntryNotFoundError(f"data position {pos} is not in the data files")
            if not mf.pin():
                raise EntryNotFoundError(f"data file {mf.path.name} was deleted")
            try:
                at = pos - mf.start_offset
                v = check_entry(mf.mm, at, mf.wrote, pos, capacity=mf.size, check_crc=False)
            finally:
                mf.unpin()
            if isinstance(v, EntryInfo):
                if v.index > limit:
                    return
                yield EntrySpan(v.index, v.term, v.pos, v.body_pos, v.body_size, v.end)
                pos = v.end
                continue
            assert isinstance(v, Verdict)
            if v.kind is VerdictKind.BLANK:
                pos = mf.end_offset
                continue
            if v.kind is VerdictKind.END_OF_DATA or v.kind is VerdictKind.INCOMPLETE:
                return
            raise EntryNotFoundError(f"walking the data at {pos}: {v.reason}")

    def _check_index(self, index: int) -> None:
        if not self._first_index <= index <= self._last_index:
            raise EntryNotFoundError(f"index {index} is outside [{self._first_index}, {self._last_index}]")

    # -- truncation ------------------------------------------------------------------
    def truncate_after(self, index: int) -> None:
        """Drop every entry after ``index`` (a follower's divergent, uncommitted tail).

        The cut is durable when this returns (the zeroed tail is fsynced), so a later
        crash cannot bring the dropped entries back behind new ones. Cutting at or below
        the committed index in the checkpoint is refused.
        """
        with self._flush_lock, self._lock:
            if self._closed:
                raise StoreClosedError("the DLedger store is closed")
            if index >= self._last_index:
                return
            if index < self._committed_index:
                raise LogMismatchError(f"truncate after {index} would drop committed index {self._committed_index}")
            if index < self._first_index - 1:
                raise LogMismatchError(f"truncate after {index}: the log starts at {self._first_index}")
            cut_pos, _size = self.entry_span(index + 1)
            new_term = self.term_at(index) if index >= self._first_index else -1
            if self.digests is not None:
                self.digests.forget_from(cut_pos)  # a sealed file cut here will hold other bytes
            self.damage.drop_from(cut_pos)
            self._spans.clear()
            self.data.truncate_after(cut_pos, online=True)
            self.index.truncate_after((index + 1) * INDEX_UNIT_SIZE, online=True)
            for queue in (self.data, self.index):
                last = queue.last()
                if last is not None:
                    sync_file(last)
            self._last_index, self._last_term = index, new_term
            self._persisted_index = min(self._persisted_index, index)

    # -- retention -------------------------------------------------------------------
    def delete_leading_files(
        self,
        may_delete: FileCondition,
        max_files: int,
        force_after_s: float,
        pause: Callable[[], object] | None = None,
    ) -> list[MappedFile]:
        """Delete leading data files (never the last) while ``may_delete(file, next_head)``
        holds, moving ``first_index`` to the first entry left, then the index files that only
        hold units below it (DLedger's CleanSpaceService and reviseLedgerBeginIndex).

        ``next_head`` is the first entry of the file after ``file``: deleting ``file`` makes
        its index the new first index, which is what the caller's rules are about (committed,
        dispatched, needed by a peer). A file whose next file does not start with an entry,
        or that is not fully flushed, is never deleted. Under the store's lock (so appends and
        truncation see a consistent list) a file leaves the list and the first index moves,
        before it becomes unreadable; it is unlinked outside the lock, and the directory is
        fsynced after each one, so a crash leaves a prefix deleted, never a hole. A file a
        reader still holds is renamed aside and removed as soon as the reader lets go.
        Before a file goes, the ``logstart`` record names the next file as the log's
        beginning (written durably, outside the lock), so recovery tells a file retention
        deleted from one that was lost. ``pause`` runs between deletions, outside the lock.
        """
        removed: list[MappedFile] = []
        while len(removed) < max_files:
            if removed and pause is not None:
                pause()
            with self._lock:
                if self._closed:
                    break
                files = self.data.files
                if len(files) < 2:
                    break
                mf, nxt = files[0], files[1]
                head = _first_entry(nxt)
                if head is None or mf.flushed < mf.wrote or not may_delete(mf, head):
                    break
            self._record_log_start(LogStart(head.index, nxt.start_offset, self.config.first_data_offset))
            with self._lock:
                if self._closed or self.data.files[:2] != [mf, nxt] or _first_entry(nxt) != head:
                    continue  # a truncation changed the files meanwhile: decide again
                self._first_index = max(self._first_index, head.index)
                self.data.detach_first_while(_is(mf))
            if self.digests is not None:
                self.digests.forget_before(nxt.start_offset)
            self.damage.drop_before(nxt.start_offset)
            _destroy(mf, self.data.clock.monotonic(), force_after_s)
            removed.append(mf)
        with self._lock:
            boundary = self._first_index * INDEX_UNIT_SIZE
            stale = [] if self._closed else self.index.detach_first_while(lambda m: m.end_offset <= boundary)
        for mf in stale:
            _destroy(mf, self.data.clock.monotonic(), force_after_s)
        return removed

    # -- durability ------------------------------------------------------------------
    def flush(self) -> int:
        """fdatasync the data, then the index; return the persisted index.

        Only entries appended before the flush began count (appends may go on meanwhile).
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return self._persisted_index
                target = self._last_index
            failpoint("dledger.before_data_fsync")
            self.data.flush()
            failpoint("dledger.before_index_fsync")
            self.index.flush()
            with self._lock:
                self._persisted_index = max(self._persisted_index, target)
                return self._persisted_index

    def save_committed_index(self, committed_index: int) -> int:
        """Write the checkpoint (endIndex, committedIndex) atomically; return what was saved.

        The index saved never exceeds the persisted index (a checkpoint must not promise
        an entry a crash could still take away) and never goes down. The value takes effect
        (``truncate_after`` refuses to cut below it) before the file is written.
        """
        with self._checkpoint_lock:
            with self._lock:
                value = max(min(committed_index, self._persisted_index), self._committed_index)
                self._committed_index = value
                end = self._last_index
            save_checkpoint(self.config.default_path, LedgerCheckpoint(end, value))
            return value

    def _record_log_start(self, start: LogStart) -> None:
        if start != self.log_start:
            save_log_start(self.config.default_path, start)
            self.log_start = start

    def end_repair(self) -> None:
        """The log holds again everything it had before the damage: forget the marker."""
        if self.repair is not None:
            clear_repair(self.config.default_path)
            self.repair = None
            self.repairs_completed += 1

    def save_term_state(self, state: TermState) -> None:
        """Persist term and vote (``currterm``) before acting on them."""
        save_term_state(self.config.default_path, state)
        self.term_state = state

    # -- lifetime --------------------------------------------------------------------
    def close(self, *, flush: bool = True) -> None:
        if flush and not self._closed:
            self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.data.close()
            self.index.close()

    def __enter__(self) -> DLedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_entry(mf: MappedFile) -> EntryInfo | None:
    """The entry a data file starts with (None if it starts with anything else)."""
    if not mf.pin():
        return None
    try:
        v = check_entry(mf.mm, 0, mf.wrote, mf.start_offset, capacity=mf.size, check_crc=False)
    finally:
        mf.unpin()
    return v if isinstance(v, EntryInfo) else None


def _is(target: MappedFile) -> Callable[[MappedFile], bool]:
    return lambda mf: mf is target


def _destroy(mf: MappedFile, now: float, force_after_s: float) -> None:
    """Unlink (or set aside, while a reader holds it) a file already out of its list, and
    make that durable before the next one goes."""
    mf.destroy(now, force_after_s)
    if mf.path.parent.exists():
        fsync_dir(mf.path.parent)


def _note_log_start(
    config: DLedgerStoreConfig, data: MappedFileQueue, result: RecoveryResult, recorded: LogStart | None
) -> LogStart:
    """The ``logstart`` record after recovery: written the first time (a store from before
    the record: its first file is taken as retention's), and when recovery emptied the log
    to start it again at index 0 (a lost beginning). A first file below the record (retention
    was interrupted between the record and the unlink) keeps the record: retention goes on."""
    first = data.first()
    if recorded is not None and not (result.damage_found and result.last_index < 0):
        return recorded
    if first is not None and result.last_index >= 0:
        start = LogStart(result.first_index, first.start_offset, config.first_data_offset)
    else:
        start = LogStart(0, config.first_data_offset, config.first_data_offset)
    if start != recorded:
        save_log_start(config.default_path, start)
    return start
