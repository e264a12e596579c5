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

Recent entries: what was just written is read back at once, by the leader for its
Appends and by every member to apply what committed. Those reads would cost an index
unit, a data read and a header check per entry, so the last entries written (bounded by
``recent_entries`` and ``recent_bytes``) are kept as the core handed them and served from
memory; older ones come from the files. A truncation drops the cached suffix with the
stored one. A reader racing an eviction misses the cache and reads the file instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.raft.types import Entry, EntryKind, HardState, Repair
from ledgermq.store.dledger import DLedgerStore, TermState

__all__ = ["LedgerStorage"]


class LedgerStorage:
    """``LogStorage`` over a DLedgerStore, plus the writes and state files the driver needs.

    The store stays owned by the caller (open it before, close it after the driver).
    """

    def __init__(self, store: DLedgerStore, *, recent_entries: int = 16384, recent_bytes: int = 32 << 20) -> None:
        self.store = store
        self._saved_commit = max(store.committed_index + 1, 0)
        self._recent: dict[int, Entry] = {}
        self._recent_lo = 0  # the lowest cached index while the cache is not empty
        self._recent_bytes = 0
        self._recent_max_entries = recent_entries
        self._recent_max_bytes = recent_bytes

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
        cached = self._recent.get(index)
        if cached is not None:
            return cached.term
        return self.store.term_at(index - 1)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries ``[lo, hi)``, stopping before ``max_bytes`` of data but never below one entry."""
        hi = min(hi, self.last_index() + 1)
        out: list[Entry] = []
        size = 0
        recent = self._recent
        for index in range(lo, hi):
            entry = recent.get(index)
            if entry is None:
                stored = self.store.get(index - 1)
                if stored.body:
                    entry = Entry(index, stored.term, stored.body)
                else:
                    entry = Entry(index, stored.term, b"", EntryKind.NOOP)
            size += len(entry.data)
            if out and size > max_bytes:
                break
            out.append(entry)
        return out

    def all_entries(self) -> list[Entry]:
        """Everything stored (a restart hands the current core its whole log)."""
        lo, hi = self.first_index(), self.last_index() + 1
        return self.entries(lo, hi, 1 << 62) if lo < hi else []

    # -- writes ----------------------------------------------------------------------
    @property
    def write_inline(self) -> bool:
        """True when ``write`` is a copy into the page cache and nothing is owed before
        ``persisted`` (the durability the caller chose is "written", with fsyncs on a timer),
        so the driver runs it on the loop instead of handing it to a thread. A bare
        DLedgerStore is fsynced before every acknowledgement, so False here."""
        return False

    def flush_due(self) -> bool:
        """Whether a timed ``flush`` would make anything durable now (``write_inline``
        storages only: the others flush after every write)."""
        return self.store.persisted_index < self.store.last_index

    def write(self, entries: Sequence[Entry], *, own: bool = False) -> None:
        """Store ``entries`` (consecutive), first dropping any stored suffix they replace.

        ``own``: a leader's own proposals of its term (the caller may skip what it already
        knows about them; a bare store has nothing to skip).

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
        self.remember(entries)

    def remember(self, entries: Sequence[Entry]) -> None:
        """Keep ``entries`` (just written, consecutive) as the cached tail, dropping any cached
        suffix they replaced and the oldest entries past the bounds."""
        recent = self._recent
        first = entries[0].index
        if recent and first <= self._recent_lo + len(recent) - 1:
            for index in range(max(first, self._recent_lo), self._recent_lo + len(recent)):
                dropped = recent.pop(index)
                self._recent_bytes -= len(dropped.data)
        if not recent:
            self._recent_lo = first
            self._recent_bytes = 0
        elif first != self._recent_lo + len(recent):
            recent.clear()  # not contiguous with the cache (cannot happen for a Raft log): start over
            self._recent_lo, self._recent_bytes = first, 0
        for e in entries:
            recent[e.index] = e
            self._recent_bytes += len(e.data)
        while recent and (len(recent) > self._recent_max_entries or self._recent_bytes > self._recent_max_bytes):
            old = recent.pop(self._recent_lo)
            self._recent_bytes -= len(old.data)
            self._recent_lo += 1

    def forget_recent(self) -> None:
        """Drop the cache (after the store was changed behind this object's back)."""
        self._recent.clear()
        self._recent_bytes = 0

    def flush(self) -> tuple[int, int]:
        """fsync what was written; the last durable raft ``(index, term)``."""
        index = self.store.flush() + 1
        return index, self.term(index)

    # -- repair of a damaged log ------------------------------------------------------
    def repair(self) -> Repair | None:
        """The core's view of the store's repair marker (raft indices), if the log is damaged.
        An unknown last term is bounded by the current term (a stricter vote rule, still safe)."""
        marker = self.store.repair
        if marker is None:
            return None
        last_term = marker.last_term if marker.last_term >= 0 else self.store.term_state.current_term
        return Repair(marker.until + 1, last_term)

    def end_repair(self) -> None:
        """The core says the log is whole again: drop the marker (a small file write)."""
        self.store.end_repair()

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
