"""Two numbers per timer-log segment: the lowest commit-log offset its units point at and
the latest slot among them.

Retention needs the first (no commit-log segment holding the record of a timer not yet
delivered may go: ``TimerStore.retention_floor``), the timer log's own cleaning the second
(a segment whose units all belong to slots already passed can go). Both come from the
same pass over a segment, and neither may cost memory per timer, so a segment is
summarised once: sealed segments found at start-up lazily, by a scan that copies 1 MiB at
a time; segments written since, unit by unit as they are filed.

Why a segment and not each timer: within a segment, units are in filing order, which is
the order of their records in the commit log (filing follows the consume queue), so its
lowest offset is close to that of its first pending unit. Keeping a segment's worth of
commit log more than strictly needed is the price of holding nothing per timer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.timer.log import UNIT, UNIT_SIZE, magic_ok

_SCAN_CHUNK = (1 << 20) // UNIT_SIZE * UNIT_SIZE  # ~1 MiB of whole units per copy


@dataclass(slots=True)
class SegmentSummary:
    min_phy: int
    max_slot: int

    def add(self, phy: int, slot_ms: int) -> None:
        if phy < self.min_phy:
            self.min_phy = phy
        if slot_ms > self.max_slot:
            self.max_slot = slot_ms


def scan(mf: MappedFile, end: int | None = None) -> SegmentSummary | None:
    """Summarise the units of ``mf`` up to ``end`` (default: its blank end or first torn
    unit); None when it holds none, or it was deleted meanwhile."""
    limit = (mf.size if end is None else end) // UNIT_SIZE * UNIT_SIZE
    summary: SegmentSummary | None = None
    pos = 0
    while pos < limit:
        try:
            chunk = mf.read(pos, min(_SCAN_CHUNK, limit - pos))
        except SegmentGoneError:
            return None
        for size, _prev, magic, enqueue_ms, delta, phy, _sz, _hash, _qoff in UNIT.iter_unpack(chunk):
            if size != UNIT_SIZE or not magic_ok(magic):
                return summary
            if summary is None:
                summary = SegmentSummary(phy, enqueue_ms + delta)
            else:
                summary.add(phy, enqueue_ms + delta)
        pos += len(chunk)
        if len(chunk) < _SCAN_CHUNK:
            break
    return summary


class SegmentBook:
    """Summaries by segment start offset. ``note`` and ``forget`` run under the timer
    store's lock; ``summary`` may run outside it (a sealed segment no longer changes)."""

    def __init__(self, file_size: int) -> None:
        self.file_size = file_size
        self._known: dict[int, SegmentSummary] = {}
        self._empty: set[int] = set()  # scanned and found holding no unit
        self._lock = threading.Lock()  # the dict is shared by the filing and the cleaning threads

    def note(self, pos: int, phy: int, slot_ms: int) -> None:
        """A unit was appended at ``pos``."""
        start = pos - pos % self.file_size
        with self._lock:
            known = self._known.get(start)
            if known is None:
                self._known[start] = SegmentSummary(phy, slot_ms)
            else:
                known.add(phy, slot_ms)

    def learn(self, mf: MappedFile, end: int) -> None:
        """Summarise the units already in ``mf`` (the segment appended to at start-up)."""
        found = scan(mf, end)
        with self._lock:
            if found is not None:
                self._known[mf.start_offset] = found

    def current(self, start: int) -> tuple[int, int] | None:
        """(min phy, max slot) of a segment summarised so far, as of now."""
        with self._lock:
            known = self._known.get(start)
            return None if known is None else (known.min_phy, known.max_slot)

    def summary(self, mf: MappedFile) -> tuple[int, int] | None:
        """(min phy, max slot) of ``mf``, scanning it once if it was sealed before start-up;
        None when it holds no unit (or is gone)."""
        got = self.current(mf.start_offset)
        if got is not None or mf.start_offset in self._empty:
            return got
        if not mf.pin():
            return None
        try:
            found = scan(mf)
        finally:
            mf.unpin()
        with self._lock:
            if found is None:
                self._empty.add(mf.start_offset)
                return None
            known = self._known.setdefault(mf.start_offset, found)
            return known.min_phy, known.max_slot

    def forget(self, start: int) -> None:
        with self._lock:
            self._known.pop(start, None)
            self._empty.discard(start)
