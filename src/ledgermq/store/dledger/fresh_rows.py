"""The dispatch rows of entries a DLedger member just wrote, kept for its reput.

Every member (the leader for its own proposals, a follower for what it copies) appends an
entry's message and soon after dispatches it, once committed. The reput used to find the
entry again in the data files (its head, then its body copied out) and read the message
back: on a 2-core machine with 256 sends in flight that was about a third of a follower's
CPU and a sixth of the leader's. The writer has the body in hand, placed (PHYSICALOFFSET
patched) and byte for byte what the files hold, so it reads the row then
(``record_scan.scan_records``, the reput's own reader) and queues it here with the entry's
span; the reput takes a run that starts exactly at its cursor and reads nothing back.

The queue is a cache, never the truth: whatever it cannot vouch for is left to the file
walk, which dispatches exactly as before.

* A run is handed out only if it starts at the reput's cursor and goes on without a gap;
  anything older than the cursor is dropped, a gap (a data file rolled, a bounded queue
  that lost its oldest entries, an entry taken but not dispatched) ends the run and the
  reput walks the files from there.
* An entry whose message the scan does not vouch for, or whose tag code depends on the
  reput's delay levels (the schedule and timer topics), carries no row: the reput reads
  it back as before, with ``check_record``'s verdict when it is not sound.
* A truncation or a re-recovery of the files clears the queue (``clear``); the writer
  adds only entries whose append returned.

Callers hold the commit log's put lock around ``add`` and ``take`` (the writer thread and
the reput's).
"""

from __future__ import annotations

from collections import deque
from typing import Final

from ledgermq.store.dispatch import SCHEDULE_TOPIC, TIMER_TOPIC
from ledgermq.store.dledger.entry import BODY_OFFSET
from ledgermq.store.dledger.ledger_store import EntrySpan
from ledgermq.store.record_scan import SIZE, TOPIC, Row, scan_records

FRESH_ENTRIES: Final = 8192
"""Entries kept at most (the oldest go first): a reput that far behind walks the files."""

TAKE_MAX: Final = 4096
"""Entries handed out per ``take``: one dispatch pass's worth."""

Fresh = tuple[EntrySpan, Row | None]
"""An entry's span and its message's row (None: read it back from the files)."""

_NO_DELAY_LEVELS: list[int] = []
_LEVEL_DEPENDENT: Final = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))


def scan_row(body: bytes | bytearray, body_pos: int) -> Row | None:
    """The row of the one message ``body`` holds at data position ``body_pos``; None unless
    ``scan_records`` vouches for the whole body (the caller then asks ``check_record``)."""
    size = len(body)
    rows, _end = scan_records(bytes(body), 0, size, body_pos, size, 1, _NO_DELAY_LEVELS)
    return rows[0] if rows and rows[0][SIZE] == size else None


class FreshRows:
    """The queue of (span, row) of entries just appended, in log order (module docstring)."""

    def __init__(self, max_entries: int = FRESH_ENTRIES) -> None:
        self._queue: deque[Fresh] = deque(maxlen=max_entries)

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, index: int, term: int, pos: int, size: int, row: Row | None) -> None:
        """An entry of ``size`` body bytes appended at data position ``pos``, with its
        message's row (``scan_row`` of the placed body) if the scan vouched for it."""
        body_pos = pos + BODY_OFFSET
        if row is not None and row[TOPIC] in _LEVEL_DEPENDENT:
            row = None  # its tag code is a due time the reput works out with its delay levels
        self._queue.append((EntrySpan(index, term, pos, body_pos, size, body_pos + size), row))

    def take(self, pos: int, max_index: int) -> list[Fresh]:
        """The run of entries from data position ``pos`` up to ``max_index`` (at most
        ``TAKE_MAX``), taken off the queue; empty when the queue does not start there."""
        queue = self._queue
        while queue and queue[0][0].pos < pos:
            queue.popleft()
        run: list[Fresh] = []
        while queue and len(run) < TAKE_MAX:
            span = queue[0][0]
            if span.pos != pos or span.index > max_index:
                break
            run.append(queue.popleft())
            pos = span.next_pos
        return run

    def clear(self) -> None:
        """The files changed under the queue (a truncation, a re-recovery)."""
        self._queue.clear()
