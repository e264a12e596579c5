"""Where durable entries live: the core reads them through ``LogStorage``; the caller writes them.

In DLedger mode the Raft log *is* the commit log (gigabytes of message bytes), so the
core cannot keep every entry in memory as it once did. As in etcd-io/raft's
``Storage``, the caller owns the durable log and the core only reads it; what the
core holds in memory is the tail the caller has not yet acknowledged as durable
(``RaftLog``'s unstable list).

The caller writes ``Ready.entries_to_persist`` into its storage (dropping any stored
suffix from the first entry's index on) and only then calls
``RaftNode.persisted(index, term)``; from that moment the core reads those entries
back from storage and forgets its own copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ledgermq.errors import InvariantViolation
from ledgermq.raft.types import Entry

__all__ = ["LogStorage", "MemoryStorage", "entry_size", "limit_size"]


class LogStorage(Protocol):
    """Durable entries, read by the core; written by the caller (the driver) before it calls
    RaftNode.persisted(). Raft indices are 1-based; index 0 is the sentinel with term 0."""

    def first_index(self) -> int:
        """The first raft index still stored (1 when nothing was compacted)."""
        ...

    def last_index(self) -> int:
        """The last stored index; 0 when empty."""
        ...

    def term(self, index: int) -> int:
        """The term at ``index``, for ``first_index() - 1 <= index <= last_index()``; ``term(0) == 0``."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries ``[lo, hi)`` up to ``max_bytes`` of data, but at least one when ``lo < hi``.

        The one-entry floor lets a single entry larger than the limit still be replicated.
        """
        ...


def entry_size(e: Entry) -> int:
    """What an entry counts against ``max_bytes``: its payload (the framing is small and fixed)."""
    return len(e.data)


def limit_size(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The longest prefix of ``entries`` within ``max_bytes``, but never fewer than one entry."""
    size = 0
    for n, e in enumerate(entries):
        size += entry_size(e)
        if size > max_bytes and n > 0:
            del entries[n:]
            break
    return entries


class MemoryStorage:
    """A ``LogStorage`` in a Python list, for tests and the simulator (which models the disk with it).

    ``append`` and ``truncate_after`` are the caller's side: the core never calls them.
    """

    __slots__ = ("_entries", "reads")

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self.reads = 0
        """How many ``entries()`` calls the core made; tests use it to see the core reads storage."""
        self.append(entries)

    def __repr__(self) -> str:
        return f"MemoryStorage(last_index={self.last_index()})"

    def first_index(self) -> int:
        return 1

    def last_index(self) -> int:
        return len(self._entries)

    def term(self, index: int) -> int:
        if index == 0:
            return 0
        if not 0 < index <= len(self._entries):
            raise InvariantViolation(f"term({index}) outside the stored log [0, {len(self._entries)}]")
        return self._entries[index - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        if not 1 <= lo <= hi <= len(self._entries) + 1:
            raise InvariantViolation(f"entries({lo}, {hi}) outside the stored log [1, {len(self._entries)}]")
        self.reads += 1
        out: list[Entry] = []
        size = 0
        for e in self._entries[lo - 1 : hi - 1]:
            size += entry_size(e)
            if size > max_bytes and out:
                break
            out.append(e)
        return out

    def append(self, entries: Sequence[Entry]) -> None:
        """Store ``entries``, first dropping any stored suffix from ``entries[0].index`` on."""
        if not entries:
            return
        first = entries[0].index
        if not 1 <= first <= len(self._entries) + 1:
            raise InvariantViolation(f"append at {first} would leave a gap after {len(self._entries)}")
        for pos, e in enumerate(entries, start=first):
            if e.index != pos:
                raise InvariantViolation(f"entries to store must be contiguous; found {e.index} at {pos}")
        del self._entries[first - 1 :]
        self._entries.extend(entries)

    def truncate_after(self, index: int) -> None:
        """Drop every stored entry above ``index``."""
        if index < 0:
            raise InvariantViolation(f"truncate_after({index})")
        del self._entries[index:]
