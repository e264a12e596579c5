"""The commit log in DLedger mode (RocketMQ's DLedgerCommitLog): messages live in the Raft log.

Every message is the body of one DLedgerEntry; a batch is one entry per message (as
DLedgerCommitLog.asyncPutMessages hands DLedger a BatchAppendEntryRequest of bodies).
Physical offsets are data positions: a message's PHYSICALOFFSET is its entry's pos +
BODY_OFFSET (48), and consume-queue units point there. Only *committed* entries count:
``max_offset`` is the end of the last committed entry (getMaxOffset returns the committed
position), so nothing uncommitted is dispatched or read through the store.

Writes come in two steps because a Raft leader proposes first and commits later:

- ``prepare_append(messages, topic, queue_id)`` (leader) assigns queue offsets and the
  store time under the put lock and returns the entry bodies;
- ``append_entries([(index, term, body), ...])`` (leader and followers) appends them and
  fills each message's PHYSICALOFFSET with its body position; a follower learns queue
  offsets from the bytes it writes;
- ``commit_to_index(index)`` moves the committed position and wakes the reput;
- ``truncate_after_index(index)`` drops an uncommitted divergent tail (never a committed
  entry); the store then rebuilds the next-offset table.

Every method that takes a Raft (DLedger) position says ``index`` in its name; the read
side takes physical offsets (data positions), as the native commit log's does.

Offsets below ``divided_offset`` belong to a native commit log that was in place when the
store switched to DLedger (RocketMQ's dividedCommitlogOffset); that log (the
``commitlog/`` directory) is held as ``old_log``, a ``CommitLog`` nothing appends to any
more, and keeps serving them read-only. This class is not a ``CommitLog``: it has none of
the native writes (a put, a slave's raw bytes, truncation by offset) to refuse.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.errors import CorruptRangeError, StoreClosedError, StoreError
from ledgermq.failpoints import failpoint
from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.store.commitlog import CommitLog, EncodedMessage, record_at, store_timestamp_at
from ledgermq.store.damage import DamageSummary
from ledgermq.store.dispatch import DispatchRequest, Placement, check_record, read_placement
from ledgermq.store.dledger.config import DLedgerStoreConfig
from ledgermq.store.dledger.entry import BODY_OFFSET, entry_body_problem
from ledgermq.store.dledger.fresh_rows import Fresh, FreshRows, scan_row
from ledgermq.store.dledger.ledger_store import DLedgerStore
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.record_scan import PHYS, QUEUE_ID, QUEUE_OFFSET, STORE_TS, SYSFLAG, TOPIC, Row
from ledgermq.store.results import AppendResult

log = logging.getLogger(__name__)

_LONG = struct.Struct(">q")
_BLANK = struct.Struct(">ii")

EntryToWrite = tuple[int, int, bytes | bytearray | memoryview]  # index, term, body


class DLedgerCommitLog:
    """The message store's commit log in DLedger mode, over a ``DLedgerStore`` (see the
    module docstring).

    The read side (``read``, ``read_from``, ``record_at``, ``properties_at``,
    ``store_timestamp_at``, ``min_offset``, ``max_offset``, ``flushed_offset``) has the
    same meaning as the native commit log's (store/log_reads.py), over data positions;
    writes are the Raft driver's, by index.
    """

    def __init__(self, old_dir: Path, segment_size: int, clock: Clock, ledger_config: DLedgerStoreConfig) -> None:
        self.old_log = CommitLog(old_dir, segment_size, clock)  # read-only: below ``divided_offset``
        self.clock = clock
        self.put_lock = threading.Lock()
        # Next consume-queue offset per "topic-queueId" (as CommitLog.queue_offsets), of
        # every stored entry, committed or not.
        self.queue_offsets: dict[str, int] = {}
        self.last_store_timestamp = 0
        self.closed = False  # set under the put lock at shutdown: later writes are refused
        self.ledger_config = ledger_config
        self._ledger: DLedgerStore | None = None
        self.divided_offset = 0  # offsets below it are the old native commit log's
        self._committed_index = -1
        self._committed_end = 0
        self.on_commit: Callable[[], None] | None = None  # wakes the reput
        self.fresh = FreshRows()
        """The rows of entries just appended, for the reput (under the put lock)."""
        self.on_corrupt: Callable[[BaseException], None] | None = None
        """Hears of a corrupt entry a read found (from the reading thread): the broker repairs."""
        self._replaced = DamageSummary()
        """Found and repaired by the ledgers ``reopen_ledger`` replaced (their counts only)."""
        self._reads_refused: str | None = None
        """Why reads are refused for now (``refusing_reads``): a re-recovery under way."""
        self.files_lock = threading.Lock()
        """Held while retention deletes data files and while ``reopen_ledger`` re-opens them, so
        a re-recovery never maps a file that retention has taken off the list but not yet
        unlinked (it would then stay mapped, and retention stuck on it)."""

    # -- opening ---------------------------------------------------------------------
    def load(self) -> None:
        """Map the old native log's segments (the DLedger files open in ``open_ledger``)."""
        self.old_log.load()

    def ledger_has_data(self) -> bool:
        data_dir = self.ledger_config.data_dir
        return data_dir.is_dir() and any(p.name.isdigit() for p in data_dir.iterdir())

    def seal_old_log(self) -> int:
        """First start in DLedger mode over a native commit log: end its last segment with a
        blank (as DLedgerCommitLog.recover does) and return where DLedger data begins."""
        last = self.old_log.queue.last()
        if last is None:
            return 0
        if last.wrote < last.size:
            rest = last.size - last.wrote
            last.write_at(last.wrote, _BLANK.pack(rest, M.BLANK_MAGIC_CODE)[: min(rest, _BLANK.size)])
            last.wrote = last.size
            last.flush()
        return last.end_offset

    def open_ledger(self, divided_offset: int) -> DLedgerStore:
        """Open (and recover) the DLedger files; data begins at ``divided_offset``."""
        self.divided_offset = divided_offset
        cfg = self.ledger_config
        if divided_offset and cfg.first_data_offset != divided_offset:
            cfg = self.ledger_config = replace(cfg, first_data_offset=divided_offset)
        self._ledger = DLedgerStore.open(cfg)
        self.fresh.clear()
        self._committed_index = -1
        self._committed_end = max(self._span_end(self.ledger.first_index - 1), divided_offset)
        self._set_committed(self.ledger.committed_index)
        return self._ledger

    def reopen_ledger(self) -> DLedgerStore:
        """Re-recover the DLedger files in place after a failed write (a Raft driver that
        fail-stopped), keeping what was committed.

        A write that failed part-way leaves the files and the in-memory positions out of
        step: an entry head without its body, an entry in the data without its index unit,
        a data file closed by a blank with no next file. Appending on would bury that
        behind new entries, so the store is closed and opened again, which recovers it
        exactly as at start-up (the torn tail is cut, missing index units are rebuilt from
        the data). The committed index known in memory is kept: every committed entry was
        completely written before the failure (the log publishes an entry only once it is
        whole), so recovery keeps it; it is checkpointed again at once, and that write
        failing (a disk still full) fails the reopen, for the caller to retry later.
        """
        with self.files_lock, self.put_lock:
            if self.closed:
                raise StoreClosedError("the commit log is shut down")
            committed = self._committed_index
            old = self._ledger
            if old is not None:
                old.close(flush=False)  # its bytes stay in the page cache the new maps read
            failpoint("dledger.reopen_after_close")
            new = DLedgerStore.open(self.ledger_config)
            self.fresh.clear()
            if old is not None:
                gone = old.damage.summary()
                self._replaced += DamageSummary(corruptions_found=gone.corruptions_found, repairs=old.repairs_completed)
            self._ledger = new
            rec = new.recovery
            if rec is not None and rec.damage_found:
                # Rot found (a read met a corrupt entry): the log was cut below it and is
                # repaired from the group; what was committed above the cut comes back then.
                committed = min(committed, new.last_index)
                self._committed_end = max(self._span_end(new.first_index - 1), self.divided_offset)
            if committed > new.last_index:
                raise StoreError(
                    f"after re-recovery the DLedger log ends at index {new.last_index} but index {committed} "
                    f"was committed; refusing to go on"
                )
            self._committed_index = -1
            self._set_committed(max(committed, new.committed_index))
            new.save_committed_index(self._committed_index)
            return new

    def damage_summary(self) -> DamageSummary:
        """The DLedger log's damage as the native store reports its own: each range a read or
        the scrub recorded (until recovery cuts the log there), and a repair under way (the
        log cut at damage and refilled from the group, until it holds every entry it had
        again) as one more range, whose bytes are not known until they are back. So a
        member counts as damaged from the moment its damage is found until it is repaired,
        across the re-recovery between the two. Found and repaired count since the process
        started (every ledger ``reopen_ledger`` opened)."""
        ledger = self._ledger
        if ledger is None:
            return self._replaced
        own = ledger.damage.summary()
        repairing = 1 if ledger.repair is not None else 0
        return self._replaced + DamageSummary(
            own.ranges + repairing, own.damaged_bytes, own.corruptions_found, ledger.repairs_completed
        )

    @contextmanager
    def refusing_reads(self, reason: str) -> Iterator[None]:
        """Refuse reads of the DLedger log (``unreadable_reason`` says ``reason``) while the
        block runs: a re-recovery closes the files, cuts the log and then the consume queues
        (the store's ``reopen_ledger``), and a pull meeting the closed files, or a unit the
        cut has not yet reached, must be told to ask again, not that its messages are gone."""
        self._reads_refused = reason
        try:
            yield
        finally:
            self._reads_refused = None

    @property
    def ledger(self) -> DLedgerStore:
        if self._ledger is None:
            raise StoreError("the DLedger store is not open")
        return self._ledger

    # -- offsets ---------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        if self.old_log.queue.files:
            return self.old_log.min_offset
        if self._ledger is None:
            return 0
        # The first data file still readable (one retention is deleting may wait for a
        # reader; it is unavailable already), as DLedgerCommitLog.getMinOffset.
        for mf in self._ledger.data.files:
            if mf.available:
                return mf.start_offset
        return self._ledger.end_pos

    @property
    def max_offset(self) -> int:
        """The end of the last committed entry (RocketMQ's getMaxOffset in DLedger mode);
        before the DLedger files are open (migration), the old commit log's end."""
        if self._ledger is None:
            return self.old_log.max_offset
        return self._committed_end

    @property
    def flushed_offset(self) -> int:
        if self._ledger is None:
            return self.old_log.flushed_offset
        return self._ledger.data.flushed_offset() if not self._ledger.data.empty else self._committed_end

    def segment_files(self) -> list[MappedFile]:
        """The old native log's segments, then the DLedger data files, oldest first."""
        data = list(self._ledger.data.files) if self._ledger is not None else []
        return self.old_log.segment_files() + data

    @property
    def committed_index(self) -> int:
        return self._committed_index

    @property
    def end_pos(self) -> int:
        """The data position after the last stored entry, committed or not."""
        return self.ledger.end_pos

    def _span_end(self, index: int) -> int:
        if index < self.ledger.first_index:
            first = self.ledger.data.first()
            return first.start_offset if first is not None else self.ledger.end_pos
        pos, size = self.ledger.entry_span(index)
        return pos + size

    def _set_committed(self, index: int) -> None:
        index = min(index, self.ledger.last_index)
        if index <= self._committed_index:
            return
        end = self._span_end(index)
        self._committed_index = index
        self._committed_end = max(end, self.divided_offset)

    # -- the two-step write ----------------------------------------------------------
    def prepare_append(self, messages: Sequence[EncodedMessage], topic: str, queue_id: int) -> list[bytearray]:
        """Assign queue offsets and the store time (leader, under the put lock); return one
        entry body per message. PHYSICALOFFSET is filled later by ``append_entries``.

        The offsets are taken whether or not the entries are ever written: a driver whose
        proposal fails calls ``rebuild_queue_offsets`` (with the reput's help, see
        DLedgerMessageStore.rebuild_queue_offsets) so the gap closes."""
        bodies: list[bytearray] = []
        with self.put_lock:
            if self.closed:
                raise StoreClosedError("the commit log is shut down")
            now = max(self.clock.wall_ms(), self.last_store_timestamp)
            for m in messages:
                if m.takes_queue_offset:
                    qoff = self.queue_offsets.get(m.queue_key, 0)
                    self.queue_offsets[m.queue_key] = qoff + 1
                else:
                    qoff = 0
                M.set_append_fields(m.data, 0, qoff, 0, now)
                bodies.append(m.data)
            self.last_store_timestamp = now
        return bodies

    def append_entries(self, entries: Sequence[EntryToWrite], *, placed: bool = False) -> list[int]:
        """Append entries (leader after ``prepare_append``, or a follower with the leader's
        bytes) and return each entry's data position. Each non-empty body must be one
        stored message; its PHYSICALOFFSET is set to its body position (pos + 48), which a
        leader's bytes already hold on a follower. Queue offsets move past what is written.
        Raises before writing anything if a body is not a message.

        ``placed``: the bodies are this leader's own, encoded here and given their queue
        offsets by ``prepare_append``; reading each one's place back would only repeat that.
        """
        prepared: list[tuple[int, int, bytearray]] = []
        facts: list[_Fact] = []
        rows: list[Row | None] = []  # a follower's pre-check reads each message's row once
        for index, term, body in entries:
            buf = body if isinstance(body, bytearray) else bytearray(body)
            row = None
            if not placed and buf:
                row, fact = _message_facts(buf, index)
                facts.append(fact)
            rows.append(row)
            prepared.append((index, term, buf))
        with self.put_lock:
            if self.closed:
                raise StoreClosedError("the commit log is shut down")
            positions = self.ledger.append_with_pos(prepared, _patch_physical_offset)
            fresh = self.fresh
            for (index, term, buf), pos, row in zip(prepared, positions, rows, strict=True):
                body_pos = pos + BODY_OFFSET
                if row is not None and row[PHYS] != body_pos:
                    # A leader's Append carries its bodies as proposed, before its own write set
                    # their PHYSICALOFFSET; the placing patch changed that field alone (the scan
                    # reads no CRC), so the row scanned from the claimed place holds but for it.
                    row = (*row[:PHYS], body_pos, *row[PHYS + 1 :])  # type: ignore[assignment]
                elif row is None and buf:
                    row = scan_row(buf, body_pos)  # placed here: read as written
                fresh.add(index, term, pos, len(buf), row)
            for topic, queue_id, sysflag, queue_offset, store_timestamp in facts:
                if SF.gets_queue_entry(sysflag):
                    key = f"{topic}-{queue_id}"
                    if self.queue_offsets.get(key, 0) <= queue_offset:
                        self.queue_offsets[key] = queue_offset + 1
                if store_timestamp > self.last_store_timestamp:
                    self.last_store_timestamp = store_timestamp
        return positions

    def commit_to_index(self, index: int) -> int:
        """Entries up to ``index`` (capped at the last stored one) are committed: move the
        committed position (never back) and wake the reput. Returns the committed index."""
        self._set_committed(index)
        wake = self.on_commit
        if wake is not None:
            wake()
        return self._committed_index

    def truncate_after_index(self, index: int) -> None:
        """Drop stored entries after ``index``; refused for ``index`` below the committed index.
        The caller (DLedgerWrites.truncate_after_index) rebuilds the queue offsets."""
        if index < self._committed_index:
            raise StoreError(f"truncate after {index} would drop committed index {self._committed_index}")
        with self.put_lock:
            self.fresh.clear()
            self.ledger.truncate_after(index)

    def take_fresh(self, pos: int, max_index: int) -> list[Fresh]:
        """The rows of the entries just appended from data position ``pos`` up to
        ``max_index``, for the reput (empty: walk the files; see fresh_rows.py)."""
        with self.put_lock:
            return self.fresh.take(pos, max_index)

    def rebuild_queue_offsets(self, base: dict[str, int], from_pos: int) -> None:
        """Next queue offsets: ``base`` (the consume queues' max offsets, which cover every
        entry before ``from_pos``) moved past every message stored from ``from_pos`` on,
        committed or not."""
        with self.put_lock:
            table = dict(base)
            for fact in self._facts_from(from_pos):
                self.last_store_timestamp = max(self.last_store_timestamp, fact.store_timestamp)
                if SF.gets_queue_entry(fact.sysflag):
                    key = f"{fact.topic}-{fact.queue_id}"
                    if table.get(key, 0) <= fact.queue_offset:
                        table[key] = fact.queue_offset + 1
            self.queue_offsets = table

    def _facts_from(self, pos: int) -> Iterable[DispatchRequest]:
        ledger = self.ledger
        for span in ledger.entries_from(max(pos, self.divided_offset)):
            if span.body_size == 0:
                continue
            body = ledger.read_body_at(span.body_pos, span.body_size)
            if body is None:
                continue
            v = check_record(body, 0, len(body), span.body_pos, check_crc=False, check_text=False)
            if isinstance(v, DispatchRequest):
                yield v

    # -- reads -----------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """A stored message (``size`` bytes at ``offset``); when it is a whole entry body, its
        entry's body CRC is checked first: a corrupt record is never returned (CorruptRangeError,
        and ``on_corrupt`` hears of it so the member repairs its log)."""
        if offset < self.divided_offset or self._ledger is None:
            return self.old_log.read(offset, size)
        if offset + size > self._committed_end:
            return None
        raw = self._ledger.read_body_at(offset - BODY_OFFSET, size + BODY_OFFSET)
        if raw is None:
            return None
        reason = entry_body_problem(raw, offset - BODY_OFFSET, size)
        if reason is not None:
            self._ledger.corrupt_reads += 1
            self._ledger.damage.report(offset - BODY_OFFSET, offset + size, f"a read: {reason}")
        elif (hit := self._ledger.damage.overlapping(offset - BODY_OFFSET, offset + size)) is not None:
            reason = f"found damaged before: {hit[2]}"
        if reason is not None:
            exc = CorruptRangeError(offset - BODY_OFFSET, offset + size, reason)
            log.error("DLedger read for a consumer refused: %s", exc)
            hook = self.on_corrupt
            if hook is not None:
                hook(exc)
            raise exc
        return raw[BODY_OFFSET:]

    def record_at(self, offset: int) -> bytes | None:
        """The whole stored message at ``offset`` (checked as ``read`` checks it)."""
        return record_at(self.read, offset)

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """Store time of the ``size``-byte message at ``offset`` or -1."""
        return store_timestamp_at(self.read, offset, size)

    def properties_at(self, offset: int, size: int) -> str | None:
        """The properties text of the ``size``-byte message at ``offset`` (what a property
        filter needs), or None if it is gone; the entry is checked as ``read`` checks it."""
        if offset < self.divided_offset or self._ledger is None:
            return self.old_log.properties_at(offset, size)
        record = self.read(offset, size)
        return M.record_properties_text(record) if record is not None else None

    def unreadable_reason(self, offset: int, size: int) -> str | None:
        """Why a record a consume-queue unit points at cannot be read now (the reader asks
        again at the same offset), or None when retention deleted it (the reader moves on).

        In DLedger mode bytes a unit points at are only ever gone for good below the log's
        first readable file. Anywhere else they are coming back: the log is being
        re-recovered (its files closed), or a repair cut it below the unit and the leader
        is re-sending the entries (the unit lies past the committed end)."""
        ledger = self._ledger
        if offset < self.divided_offset or ledger is None:
            return self.old_log.unreadable_reason(offset, size)
        refused = self._reads_refused
        if refused is not None:
            return refused
        if ledger.closed:
            return "the DLedger log is closed while it is re-recovered"
        end = offset + size
        if end > self._committed_end:
            return (
                f"commit log [{offset}, {end}) lies past what this member's DLedger log holds committed "
                f"({self._committed_end}); the group's leader is re-sending it"
            )
        if offset < self.min_offset:
            return None
        return f"commit log [{offset}, {end}) could not be read from this member's DLedger log; it stays in place"

    def read_from(self, offset: int, max_bytes: int) -> bytes:
        if offset < self.divided_offset or self._ledger is None:
            return self.old_log.read_from(offset, max_bytes)
        mf = self._ledger.data.find(offset)
        if mf is None:
            return b""
        end = min(self._committed_end, mf.end_offset, offset + max_bytes)
        if end <= offset:
            return b""
        return self._ledger.read_body_at(offset, end - offset) or b""

    def close(self) -> None:
        """Flush the DLedger files and checkpoint the committed index, then close."""
        with self.put_lock:
            if self.closed:
                return
            self.closed = True
            self.old_log.close()
        ledger = self._ledger
        if ledger is not None:
            try:
                ledger.flush()
                ledger.save_committed_index(self._committed_index)
            except (OSError, StoreError) as exc:
                log.error("DLedger flush at close failed: %s", exc)
            ledger.close(flush=False)

    def abandon(self) -> None:
        """Close without flushing or checkpointing (tests' crash simulation)."""
        with self.put_lock:
            if self.closed:
                return
            self.closed = True
            self.old_log.close()
        if self._ledger is not None:
            self._ledger.close(flush=False)

    @staticmethod
    def append_result(bodies: Sequence[bytearray], positions: Sequence[int], topic: str, queue_id: int) -> AppendResult:
        """The put result of entries written at ``positions`` (a leader answering a send once
        they are committed): wrote offset = first body position, one offset message id per
        message, naming the store host the record carries."""
        first = bodies[0]
        if len(bodies) == 1:  # a single send, nearly every answer: no comprehensions
            ids = [M.offset_msg_id_of(first, positions[0] + BODY_OFFSET)]
            wrote = len(first)
        else:
            ids = [M.offset_msg_id_of(body, pos + BODY_OFFSET) for body, pos in zip(bodies, positions, strict=True)]
            wrote = sum(len(b) for b in bodies)
        queue_offset, store_timestamp = M.queue_offset_and_store_time(first)
        return AppendResult(
            wrote_offset=positions[0] + BODY_OFFSET,
            wrote_bytes=wrote,
            msg_ids=ids,
            store_timestamp=store_timestamp,
            queue_offset=queue_offset,
            msg_num=len(bodies),
            topic=topic,
            queue_id=queue_id,
        )


def _patch_physical_offset(body: bytearray, body_pos: int) -> None:
    if body:
        _LONG.pack_into(body, M.PHYSICALOFFSET_POS, body_pos)


_Fact = tuple[str, int, int, int, int]
"""Where a follower's message belongs: topic, queue id, sysflag, queue offset, store time."""


def _message_facts(body: bytearray, index: int) -> tuple[Row | None, _Fact]:
    """Where a body's message belongs (the body checked to be one record naming its own
    PHYSICALOFFSET), and its dispatch row when the reput's scan vouches for it (nearly
    always: then the body is read once, here, for both)."""
    if len(body) < M.PHYSICALOFFSET_POS + 8:
        raise StoreError(f"entry {index}: a {len(body)}-byte body is not a stored message")
    claimed = _LONG.unpack_from(body, M.PHYSICALOFFSET_POS)[0]
    row = scan_row(body, claimed)
    if row is not None:
        return row, (row[TOPIC], row[QUEUE_ID], row[SYSFLAG], row[QUEUE_OFFSET], row[STORE_TS])
    v = read_placement(body, 0, len(body), claimed)
    if not isinstance(v, Placement) or v.size != len(body):
        reason = v.reason if not isinstance(v, Placement) else f"record of {v.size} bytes"
        raise StoreError(f"entry {index}: the body is not one stored message ({reason})")
    return None, (v.topic, v.queue_id, v.sysflag, v.queue_offset, v.store_timestamp)
