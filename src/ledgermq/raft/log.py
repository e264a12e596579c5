"""The Raft log as the core sees it: durable entries in the caller's storage, plus an in-memory unstable tail.

In DLedger mode the log is the broker's commit log, far too big to hold in memory, so
(as etcd-io/raft's ``raftLog`` over ``Storage`` and ``unstable``) the core keeps only
the entries the caller has not yet acknowledged as durable. Entries through
``persisted`` are read from ``storage``; the unstable list holds
``persisted + 1 .. last_index``. Index 0 is a sentinel with term 0, so the first
Append's "previous entry" always matches. Four cursors move forward through the log,
and their order is the core's main safety argument:

    applied <= committed,  applied <= persisted < unsent_from <= last_index + 1

``persisted`` only moves when the caller acknowledges durability, so a restart that
loses the unsynced tail never loses an entry this node has acknowledged to anyone.
``committed`` may run ahead of ``persisted`` on a follower (the leader told it so);
what is applied and what goes into the hard state is capped by both. Entries in
``[persisted + 1, unsent_from)`` have been handed to the caller and are being written;
the rest of the unstable tail is still to be handed out.

Storage is trusted only through ``persisted``: above it the caller's storage may hold
a stale suffix (from before a conflict truncation) or a write still in progress, so
the core never reads storage above ``persisted``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ledgermq.errors import InvariantViolation
from ledgermq.raft.storage import LogStorage, entry_size, limit_size
from ledgermq.raft.types import Entry

_NO_LIMIT = 1 << 62


class _Write:
    """One batch handed to the caller by ``take_unsent``, not yet acknowledged durable.

    ``valid`` is the last index of the batch that is still part of our log: a conflict
    truncation at ``c`` caps it to ``c - 1``, because the caller will later overwrite
    those indices with other entries (possibly with the same terms, so only the order of
    acknowledgements, not their ``(index, term)``, tells the writes apart).
    """

    __slots__ = ("hi", "hi_term", "lo", "valid")

    def __init__(self, lo: int, hi: int, hi_term: int) -> None:
        self.lo = lo
        self.hi = hi
        self.hi_term = hi_term
        self.valid = hi


class RaftLog:
    __slots__ = (
        "_buf",
        "_head",
        "_writes",
        "applied",
        "committed",
        "last_index",
        "persisted",
        "storage",
        "unsent_from",
    )

    def __init__(self, storage: LogStorage, committed: int = 0, applied: int = 0) -> None:
        first, last = storage.first_index(), storage.last_index()
        if first < 1 or last < first - 1:
            raise InvariantViolation(f"storage reports first_index={first} after last_index={last}")
        if not 0 <= applied <= committed <= last:
            raise InvariantViolation(f"restored cursors out of order: applied={applied} commit={committed} last={last}")
        if applied < first - 1:
            raise InvariantViolation(f"applied={applied} is below the compacted prefix (first index {first})")
        self.storage = storage
        self.committed = committed
        self.applied = applied
        self.persisted = last  # whatever was restored came from the caller's disk
        self.unsent_from = last + 1
        # The unstable tail is ``_buf[_head:]``, index ``persisted + 1`` first. Acknowledged
        # entries are skipped by moving ``_head`` and compacted away once they are at least
        # half the list, so each acknowledgement costs O(1) amortised, not a copy of the tail.
        self._buf: list[Entry] = []
        self._head = 0
        self.last_index = last
        """``persisted + len(_buf) - _head``, kept as a field: the core reads it a dozen times
        per Raft round; ``append`` and ``_truncate_from`` move it, nothing else does."""
        self._writes: deque[_Write] = deque()

    # -- reading ---------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """The index of the first unstable entry (``persisted + 1``)."""
        return self.persisted + 1

    @property
    def unstable_len(self) -> int:
        return len(self._buf) - self._head

    @property
    def last_term(self) -> int:
        if len(self._buf) > self._head:
            return self._buf[-1].term
        return self.storage.term(self.persisted)

    def term(self, index: int) -> int | None:
        """The term at ``index``; 0 for the sentinel, None past the end or inside a compacted prefix."""
        if index > self.persisted:
            pos = self._head + index - self.persisted - 1
            return self._buf[pos].term if pos < len(self._buf) else None
        if index < self.storage.first_index() - 1:
            return None
        return 0 if index == 0 else self.storage.term(index)

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    @property
    def first_index(self) -> int:
        """The first index the log can still return an entry for (storage may have compacted below it)."""
        return self.storage.first_index()

    def slice(self, lo: int, hi: int, max_count: int | None = None, max_bytes: int | None = None) -> list[Entry]:
        """Entries ``[lo, hi)``, cut to ``max_count`` and ``max_bytes`` but never below one entry.

        At least one entry is returned (when any exist) so a single oversized entry
        still makes progress instead of stalling replication forever. The durable part
        comes from storage, the rest from the unstable tail.
        """
        hi = min(hi, self.last_index + 1)
        if max_count is not None:
            hi = min(hi, lo + max(max_count, 1))
        if lo >= hi:
            return []
        if lo < self.first_index:
            raise InvariantViolation(f"entries from {lo} were compacted (first index {self.first_index})")
        budget = _NO_LIMIT if max_bytes is None else max_bytes
        split = self.persisted + 1
        out: list[Entry] = []
        if lo < split:
            stable_hi = min(hi, split)
            out = self.storage.entries(lo, stable_hi, budget)
            if not out or out[-1].index != stable_hi - 1 or stable_hi == hi:
                return out  # done, or the byte limit cut the durable part short
            budget -= sum(entry_size(e) for e in out)
            lo = split
        start = self._head + lo - split
        tail = self._buf[start : start + hi - lo]
        if not out:
            return limit_size(tail, budget)
        # The durable part already guarantees progress, so here the limit is strict.
        for e in tail:
            budget -= entry_size(e)
            if budget < 0:
                break
            out.append(e)
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: grant a vote only to a log at least as up to date as ours."""
        our_term = self.last_term
        return last_term > our_term or (last_term == our_term and last_index >= self.last_index)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest ``(i, term(i))`` with ``i <= index`` and ``term(i) <= term``.

        A follower that rejects an Append at ``(index, term)`` knows every entry of ours
        with a term above ``term`` cannot match the leader's entry at that index, so it
        can hint the leader to skip all of them at once instead of one per round trip.
        Inside a compacted prefix the term is unknown: ``(i, 0)`` then says "probe here".
        """
        index = min(index, self.last_index)
        while index > 0:
            t = self.term(index)
            if t is None:
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    # -- writing ---------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries right after the last one (the leader's path: it never overwrites)."""
        if entries and entries[0].index != self.last_index + 1:
            raise InvariantViolation(f"append at {entries[0].index} after last index {self.last_index}")
        if entries:
            self._buf.extend(entries)
            self.last_index = entries[-1].index

    def maybe_append(self, prev_index: int, prev_term: int, entries: Sequence[Entry]) -> int | None:
        """Accept a leader's Append; the index of its last entry, or None if ``prev`` does not match.

        Only a term mismatch truncates: a late or duplicated Append that carries fewer
        entries than we already hold leaves our (matching) longer tail alone.
        """
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        last = self.last_index
        for pos, e in enumerate(entries):
            if e.index <= last and self.term(e.index) == e.term:
                continue
            if e.index <= last:
                self._truncate_from(e.index)
            self.append(entries[pos:])
            break
        return last_new

    def _truncate_from(self, index: int) -> None:
        """Drop ``index`` and everything after it; the caller's storage follows at the next Ready.

        A conflict inside the durable part empties the unstable tail and moves
        ``persisted`` back: the next ``entries_to_persist`` starts at ``index``, which
        tells the caller to truncate its storage there.
        """
        if index <= self.committed:
            raise InvariantViolation(f"truncating committed entry {index} (commit {self.committed})")
        if index > self.persisted:
            del self._buf[self._head + index - self.persisted - 1 :]
        else:
            self._buf = []
            self._head = 0
            self.persisted = index - 1
        self.last_index = index - 1
        self.unsent_from = min(self.unsent_from, index)
        for w in self._writes:
            w.valid = min(w.valid, index - 1)

    def commit_to(self, index: int) -> bool:
        """Move the commit index forward (never back); True if it moved."""
        if index <= self.committed:
            return False
        if index > self.last_index:
            raise InvariantViolation(f"commit {index} beyond last index {self.last_index}")
        self.committed = index
        return True

    # -- the caller's side -------------------------------------------------------------

    def unsent_entries(self) -> list[Entry]:
        return self._buf[self._head + self.unsent_from - self.persisted - 1 :]

    def take_unsent(self) -> list[Entry]:
        """The entries not yet handed to the caller; from now on they count as being written."""
        entries = self.unsent_entries()
        if entries:
            self._writes.append(_Write(entries[0].index, entries[-1].index, entries[-1].term))
            self.unsent_from = entries[-1].index + 1
        return entries

    def persisted_to(self, index: int, term: int) -> bool:
        """Record that the caller made everything through ``index`` durable; True if it helped.

        The acknowledgement is matched against the oldest outstanding write that holds
        ``(index, term)``: writes complete in the order they were handed out, so the
        earlier ones are done as well. A write whose entries were truncated since proves
        only the prefix that is still ours (``_Write.valid``); an acknowledgement that
        matches no outstanding write (a duplicate, or one for a log since rewritten) is
        ignored. Comparing terms alone is not enough: a suffix can be replaced twice
        and end up with the same ``(index, term)`` while an older write is still queued
        behind a newer one.
        """
        k = self._find_write(index, term)
        if k is None:
            return False
        w = self._writes[k]
        through = min(index, w.valid)
        for _ in range(k):
            through = max(through, self._writes.popleft().valid)
        if index == w.hi:
            self._writes.popleft()
        else:
            w.lo = index + 1
        if through <= self.persisted:
            return False
        want = self.term(through)
        if through > self.storage.last_index() or self.storage.term(through) != want:
            raise InvariantViolation(
                f"persisted({index}, {term}) but storage does not hold entry {through} of term {want}:"
                " write entries_to_persist to the storage before acknowledging them"
            )
        self._stable_to(through)
        return True

    def _find_write(self, index: int, term: int) -> int | None:
        """The position of the oldest outstanding write that ``(index, term)`` can acknowledge."""
        for k, w in enumerate(self._writes):
            if w.lo <= index <= w.hi and (
                (index == w.hi and term == w.hi_term) or (index <= w.valid and self.term(index) == term)
            ):
                return k
        return None

    def _stable_to(self, index: int) -> None:
        self._head += index - self.persisted
        self.persisted = index
        if self._head == len(self._buf):
            self._buf = []
            self._head = 0
        elif self._head * 2 >= len(self._buf):
            del self._buf[: self._head]
            self._head = 0

    @property
    def applicable(self) -> int:
        """How far the caller may apply: committed and durable here, so a restart re-finds it."""
        return min(self.committed, self.persisted)

    def entries_to_apply(self, max_bytes: int | None = None) -> list[Entry]:
        return self.slice(self.applied + 1, self.applicable + 1, max_bytes=max_bytes)

    def applied_to(self, index: int) -> None:
        if index < self.applied or index > self.applicable:
            raise InvariantViolation(f"applied_to({index}) outside [{self.applied}, {self.applicable}]")
        self.applied = index
