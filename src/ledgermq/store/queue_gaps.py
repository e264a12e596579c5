"""Consume-queue units for records lost in a damaged range, and the queues' integrity counters.

The case: records were appended, the process crashed before they were dispatched, and the
bytes holding some of them are damaged (found by recovery, or registered earlier). Their
consume-queue units were never written, so the next sound record of the same queue names
a queue offset beyond the queue's end. Leaving that record undispatched would make it and
every later record of the queue vanish; dispatching it at a lower offset would renumber the
queue. Neither is acceptable.

What is done instead: the queue offsets between the queue's end and that record are given
*placeholder* units that point at the damaged bytes: commit-log offset = the start of the
first damaged range between the queue's last record and this one, size = up to the end of
the last such range (so the unit overlaps every range that may hold the missing records).
A read of such an offset overlaps a damaged range and is refused with CorruptRangeError,
exactly as a read of a damaged record whose unit survived; the later records are
dispatched at their own offsets. When ``repair_range`` dispatches the repaired records,
each placeholder is rewritten with its record's real unit (``ConsumeQueue.rewrite``). A
placeholder stays refused until *every* range it overlaps is repaired, so a partial repair
never makes it point at sound bytes of another record.

The count is exact: queue offsets are consecutive, the record before the gap and the one
after it are sound and name their own offsets, and the only bytes between them that could
not be read are the damaged ones. A gap with no damaged range between the two records is
not explained by damage: it is logged as an error and counted, and the record is left
undispatched as before (the queue check rebuilds such a queue from the commit log).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ledgermq.store.damage import DamageRegistry

MAX_UNIT_SIZE = 0x7FFFFFFE  # 0x7FFFFFFF marks a pre-blank unit


@dataclass(slots=True)
class QueueIntegrityStats:
    """Counters for runtime_info and metrics (updated from any thread; reads may lag)."""

    placeholders: int = 0  # units written for records lost in damaged ranges
    units_rewritten: int = 0  # units that disagreed with their record and were rewritten
    queue_rebuilds: int = 0  # queues re-derived from the commit log
    units_checked: int = 0  # units compared with their records (start-up and scrub)
    unexplained_gaps: int = 0  # units not dispatched: a gap no damaged range explains
    index_rebuilds: int = 0  # index files dropped (failed their own checks) and rebuilt
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


def placeholder_unit(damage: DamageRegistry | None, after: int, before: int) -> tuple[int, int] | None:
    """(commit-log offset, size) of the placeholder unit for records missing between
    commit-log offsets ``after`` (the end of the queue's last record) and ``before`` (the
    record that found the gap), or None when no damaged range lies between them."""
    if damage is None or not damage.any or before <= after:
        return None
    spans = damage.within(max(after, 0), before)
    if not spans:
        return None
    start, end = spans[0][0], spans[-1][1]
    return start, min(end - start, MAX_UNIT_SIZE)
