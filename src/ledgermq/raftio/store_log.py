"""``StoreLog``: the Raft log of a broker in DLedger mode, which is its message store.

``LedgerStorage`` reads and writes a bare DLedgerStore. A broker's Raft log is the same
DLedgerStore, owned by its ``DLedgerMessageStore``, and every write must go
through that store: it fills each message's PHYSICALOFFSET with the entry's position (the
same on every node, since data files roll alike), moves the next queue offsets past what a
follower copies, and rebuilds them after a truncation. Reads, flushes and the term/vote and
commit files stay ``LedgerStorage``'s.

``commit(entries)`` is what the driver's ``on_commit`` calls: the store dispatches the
committed messages to its consume queues and wakes pulls waiting for them.

Durability follows the broker's flushDiskType, as RocketMQ's DLedger mode does: under
SYNC_FLUSH an entry counts as persisted (towards the quorum that answers SEND_OK) only once
fsynced; under ASYNC_FLUSH once written to the page cache, with an fsync at most every
flushIntervalCommitLog. Then a SEND_OK means a quorum of processes holds the message: a
process crash loses nothing, a power cut of one machine loses nothing the others hold.

Index bases: raft index = DLedger index + 1 (see ledger_storage.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.config import FlushDiskType
from ledgermq.errors import StoreError
from ledgermq.raft.types import Entry, EntryKind
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.store.dledger.mode_store import DLedgerMessageStore


class StoreLog(LedgerStorage):
    def __init__(self, store: DLedgerMessageStore) -> None:
        if not isinstance(store, DLedgerMessageStore):  # callers outside the type checker
            raise StoreError("a Raft log needs a store in DLedger mode (enableDLegerCommitLog=true)")
        super().__init__(store.commitlog.ledger)
        self.message_store = store
        self.sync_flush = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.flush_interval_s = store.config.flush_interval_commitlog_ms / 1000
        self._last_fsync = 0.0

    @property
    def write_inline(self) -> bool:
        """Under ASYNC_FLUSH an entry is persisted once written: no fsync to wait for, so no
        thread hand-off either (the fsync on the timer still runs in a thread)."""
        return not self.sync_flush

    def flush_due(self) -> bool:
        """Whether a timed fsync would do anything now: something written is not yet durable
        and flushIntervalCommitLog has passed (checked on the loop, so an idle or recently
        flushed log costs the driver no thread hand-off per tick)."""
        if self.store.persisted_index >= self.store.last_index:
            return False
        return self.sync_flush or self.message_store.clock.monotonic() - self._last_fsync >= self.flush_interval_s

    def flush(self) -> tuple[int, int]:
        """fsync under SYNC_FLUSH; under ASYNC_FLUSH at most every flushIntervalCommitLog."""
        now = self.message_store.clock.monotonic()  # the store's clock paces the timed fsyncs
        if self.sync_flush or now - self._last_fsync >= self.flush_interval_s:
            self._last_fsync = now
            return super().flush()
        last = self.last_index()
        return last, self.term(last)

    def write(self, entries: Sequence[Entry], *, own: bool = False) -> None:
        """Store ``entries`` through the message store, first cutting any suffix they replace
        (only ever an uncommitted one: the store refuses to cut below its committed index).
        ``own``: the leader's proposals, whose queue offsets ``prepare_append`` already
        gave out, so the store need not read each message's place back."""
        if not entries:
            return
        for e in entries:
            if e.kind is EntryKind.NORMAL and not e.data:
                raise ValueError(f"entry {e.index} is NORMAL with no data; empty bodies mean NOOP on disk")
        first = entries[0].index
        if first <= self.last_index():
            self.message_store.truncate_after_index(first - 2)  # keep raft first - 1 = DLedger first - 2
        self.message_store.append_entries(
            [(e.index - 1, e.term, b"" if e.kind is EntryKind.NOOP else e.data) for e in entries], placed=own
        )
        self.remember(entries)

    def commit(self, entries: Sequence[Entry]) -> None:
        """The driver's ``on_commit``: these entries (in index order) are committed."""
        if entries:
            self.message_store.commit_to_index(entries[-1].index - 1)
