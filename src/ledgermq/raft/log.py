"""The in-memory Raft log and the cursors that say how much of it is durable, committed and applied.

Index ``i`` lives at ``self._entries[i - 1]``; index 0 is a sentinel with term 0, so
the first Append's "previous entry" always matches. Four cursors move forward through
the log, and their order is the core's main safety argument:

    applied <= committed,  applied <= persisted < unsent_from <= last_index + 1

``persisted`` only moves when the caller acknowledges durability, so a restart that
loses the unsynced tail never loses an entry this node has acknowledged to anyone.
``committed`` may run ahead of ``persisted`` on a follower (the leader told it so);
what is applied and what goes into the hard state is capped by both.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.errors import InvariantViolation
from ledgermq.raft.types import Entry


class RaftLog:
    __slots__ = ("_entries", "applied", "committed", "persisted", "unsent_from")

    def __init__(self, entries: Sequence[Entry] = (), committed: int = 0, applied: int = 0) -> None:
        for pos, e in enumerate(entries, start=1):
            if e.index != pos:
                raise InvariantViolation(f"restored log must be contiguous from 1; found {e.index} at {pos}")
        self._entries: list[Entry] = list(entries)
        last = len(self._entries)
        if not 0 <= applied <= committed <= last:
            raise InvariantViolation(f"restored cursors out of order: applied={applied} commit={committed} last={last}")
        self.committed = committed
        self.applied = applied
        self.persisted = last  # whatever was restored came from the caller's disk
        self.unsent_from = last + 1

    # -- reading ---------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else 0

    def term(self, index: int) -> int | None:
        """The term at ``index``; 0 for the sentinel, None past the end."""
        if index == 0:
            return 0
        if 0 < index <= len(self._entries):
            return self._entries[index - 1].term
        return None

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def entry(self, index: int) -> Entry:
        return self._entries[index - 1]

    def slice(self, lo: int, hi: int, max_count: int | None = None, max_bytes: int | None = None) -> list[Entry]:
        """Entries ``[lo, hi)``, cut to ``max_count`` and ``max_bytes`` but never below one entry.

        At least one entry is returned (when any exist) so a single oversized entry
        still makes progress instead of stalling replication forever.
        """
        hi = min(hi, len(self._entries) + 1)
        if max_count is not None:
            hi = min(hi, lo + max(max_count, 1))
        out = self._entries[lo - 1 : hi - 1]
        if max_bytes is not None and len(out) > 1:
            size = 0
            for n, e in enumerate(out):
                size += len(e.data)
                if size > max_bytes and n > 0:
                    return out[:n]
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: grant a vote only to a log at least as up to date as ours."""
        return last_term > self.last_term or (last_term == self.last_term and last_index >= self.last_index)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest ``(i, term(i))`` with ``i <= index`` and ``term(i) <= term``.

        A follower that rejects an Append at ``(index, term)`` knows every entry of ours
        with a term above ``term`` cannot match the leader's entry at that index, so it
        can hint the leader to skip all of them at once instead of one per round trip.
        """
        index = min(index, self.last_index)
        while index > 0:
            t = self._entries[index - 1].term
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    # -- writing ---------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries right after the last one (the leader's path: it never overwrites)."""
        if entries and entries[0].index != self.last_index + 1:
            raise InvariantViolation(f"append at {entries[0].index} after last index {self.last_index}")
        self._entries.extend(entries)

    def maybe_append(self, prev_index: int, prev_term: int, entries: Sequence[Entry]) -> int | None:
        """Accept a leader's Append; the index of its last entry, or None if ``prev`` does not match.

        Only a term mismatch truncates: a late or duplicated Append that carries fewer
        entries than we already hold leaves our (matching) longer tail alone.
        """
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for pos, e in enumerate(entries):
            existing = self.term(e.index)
            if existing == e.term:
                continue
            if existing is not None:
                self._truncate_from(e.index)
            self.append(entries[pos:])
            break
        return last_new

    def _truncate_from(self, index: int) -> None:
        if index <= self.committed:
            raise InvariantViolation(f"truncating committed entry {index} (commit {self.committed})")
        del self._entries[index - 1 :]
        self.persisted = min(self.persisted, index - 1)
        self.unsent_from = min(self.unsent_from, index)

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
        return self._entries[self.unsent_from - 1 :]

    def mark_sent(self, through: int) -> None:
        self.unsent_from = max(self.unsent_from, through + 1)

    def persisted_to(self, index: int, term: int) -> bool:
        """Record that the caller made everything through ``index`` durable; True if it helped.

        The term check drops a stale acknowledgement: if the log was truncated and
        rewritten since that write was handed out, the entry at ``index`` now has a
        different term and the old write proves nothing about the new entries.
        """
        if index <= self.persisted or index >= self.unsent_from or not self.match_term(index, term):
            return False
        self.persisted = index
        return True

    @property
    def applicable(self) -> int:
        """How far the caller may apply: committed and durable here, so a restart re-finds it."""
        return min(self.committed, self.persisted)

    def entries_to_apply(self) -> list[Entry]:
        return self._entries[self.applied : self.applicable]

    def applied_to(self, index: int) -> None:
        if index < self.applied or index > self.applicable:
            raise InvariantViolation(f"applied_to({index}) outside [{self.applied}, {self.applicable}]")
        self.applied = index
