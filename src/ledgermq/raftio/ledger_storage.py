"""``LedgerStorage``: the Raft core's log storage over a DLedgerStore (store-facing, no asyncio).

The core counts from 1, DLedger from 0: raft index = DLedger index + 1, and raft index 0
(term 0) is the position before the log. Terms come from the store's 32-byte index units
(one small read, no body), bodies from its data files. A NOOP entry (what a new leader
appends so earlier terms can commit) is stored as an empty body, which is how it is told
apart on read: a NORMAL entry must therefore carry data (a broker's entries always hold a
message record; ``write`` refuses an empty one rather than let it turn into a NOOP).

The hard state lives in DLedger's own files: term and vote in ``currterm`` (written
atomically and fsynced whenever either changes, before the driver sends anything), the
commit index in ``checkpoint`` as ``committedIndex`` (DLedger-based, so raft commit - 1),
written lazily because a lost commit index is only re-learned from the leader, never
unsafe. The store clamps a checkpoint to what it has flushed.

Thread safety: the driver writes from one worker thread at a time while the core may read
terms and entries from the loop thread; the store serialises writers and lets readers
read up to its published last index without a lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.raft.types import Entry, EntryKind, HardState
from ledgermq.store.dledger import DLedgerStore, TermState

__all__ = ["LedgerStorage"]


class LedgerStorage:
    """``LogStorage`` over a DLedgerStore, plus the writes and state files the driver needs.

    The store stays owned by the caller (open it before, close it after the driver).
    """

    def __init__(self, store: DLedgerStore) -> None:
        self.store = store
        self._saved_commit = max(store.committed_index + 1, 0)

    # -- LogStorage ------------------------------------------------------------------
    def first_index(self) -> int:
        """1 while nothing was deleted; after retention, the raft index *after* the first
        stored entry: the core needs ``term(first_index() - 1)``, and the stored first
        entry is the only one below it whose term the store still knows (etcd's dummy entry)."""
        first = self.store.first_index
        return first + 1 if first == 0 else first + 2

    def last_index(self) -> int:
        return self.store.last_index + 1

    def term(self, index: int) -> int:
        """The term of raft ``index``; 0 for index 0. IndexError outside the stored range."""
        if index == 0:
            return 0
        return self.store.term_at(index - 1)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries ``[lo, hi)``, stopping before ``max_bytes`` of data but never below one entry."""
        hi = min(hi, self.last_index() + 1)
        out: list[Entry] = []
        size = 0
        for index in range(lo, hi):
            stored = self.store.get(index - 1)
            size += len(stored.body)
            if out and size > max_bytes:
                break
            if stored.body:
                out.append(Entry(index, stored.term, stored.body))
            else:
                out.append(Entry(index, stored.term, b"", EntryKind.NOOP))
        return out

    def all_entries(self) -> list[Entry]:
        """Everything stored (a restart hands the current core its whole log)."""
        lo, hi = self.first_index(), self.last_index() + 1
        return self.entries(lo, hi, 1 << 62) if lo < hi else []

    # -- writes ----------------------------------------------------------------------
    def write(self, entries: Sequence[Entry]) -> None:
        """Store ``entries`` (consecutive), first dropping any stored suffix they replace.

        The core may hand out entries starting at or below our last index after a conflict;
        everything from ``entries[0].index`` on is cut (durably) before the append. Not
        durable until ``flush``.
        """
        if not entries:
            return
        first = entries[0].index
        for e in entries:
            if e.kind is EntryKind.NORMAL and not e.data:
                raise ValueError(f"entry {e.index} is NORMAL with no data; empty bodies mean NOOP on disk")
        if first <= self.last_index():
            self.store.truncate_after(first - 2)  # keep raft first - 1 = DLedger first - 2
        self.store.append([(e.index - 1, e.term, b"" if e.kind is EntryKind.NOOP else e.data) for e in entries])

    def flush(self) -> tuple[int, int]:
        """fsync what was written; the last durable raft ``(index, term)``."""
        index = self.store.flush() + 1
        return index, self.term(index)

    # -- hard state ------------------------------------------------------------------
    def load_hard_state(self) -> HardState:
        ts = self.store.term_state
        return HardState(ts.current_term, ts.vote_for, max(self.store.committed_index + 1, 0))

    def save_hard_state(self, hs: HardState) -> None:
        """Make term and vote durable if they changed (``currterm``); the commit waits for ``save_commit``."""
        ts = self.store.term_state
        if (ts.current_term, ts.vote_for) != (hs.term, hs.vote):
            self.store.save_term_state(TermState(hs.term, hs.vote))

    def save_commit(self, commit: int) -> int:
        """Checkpoint raft ``commit`` (clamped by the store to what is flushed); the raft index saved."""
        if commit <= self._saved_commit:
            return self._saved_commit
        self._saved_commit = self.store.save_committed_index(commit - 1) + 1
        return self._saved_commit

    @property
    def saved_commit(self) -> int:
        return self._saved_commit
