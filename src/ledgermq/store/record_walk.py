"""Walking the commit log's records between two offsets, over damaged ranges.

What rebuilding derived data (consume queues, the index) from the commit log needs: every
complete record in ``[start, stop)``, parsed as the reput parses it (no body CRC, no text
checks; the reads check what they serve). Registered damaged ranges are stepped over, since
their bytes cannot be trusted to frame records; bytes that do not frame a record and are not
registered yet are registered here (the walk resyncs on the next sound record), so nothing
is skipped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ledgermq.store.commitlog import CommitLog
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.dispatch import BLANK, END_OF_DATA, INCOMPLETE, DispatchRequest, check_record
from ledgermq.store.record_check import next_sound_record

log = logging.getLogger(__name__)


def walk_records(
    commitlog: CommitLog,
    damage: DamageRegistry,
    start: int,
    stop: int,
    delay_levels_ms: list[int],
    why: str,
) -> Iterator[DispatchRequest]:
    """The records from ``start`` (a record boundary, or inside a damaged range) up to
    ``stop``. ``why`` names the walk in what it registers as damaged."""
    pos = max(start, commitlog.min_offset)
    while pos < stop:
        hit = damage.overlapping(pos, pos + 1)
        if hit is not None:
            pos = hit[1]
            continue
        mf = commitlog.queue.find(pos)
        if mf is None or not mf.pin():
            low = commitlog.min_offset
            if low > pos:
                pos = low  # retention removed it meanwhile
                continue
            return
        try:
            base = mf.start_offset
            limit = min(mf.wrote, stop - base)
            rel = pos - base
            while rel < limit:
                if damage.any and damage.overlapping(base + rel, base + rel + 1) is not None:
                    break  # the outer loop steps over it
                v = check_record(mf.mm, rel, mf.wrote, base + rel, check_crc=False,
                                 delay_levels_ms=delay_levels_ms, capacity=mf.size, check_text=False)  # fmt: skip
                if isinstance(v, DispatchRequest):
                    yield v
                    rel += v.size
                    continue
                if v.reason == BLANK:
                    rel = mf.size
                    break
                if v.reason in (END_OF_DATA, INCOMPLETE):
                    return
                nxt = next_sound_record(mf.mm, rel + 1, mf.size, base, check_crc=False)
                bad_end = base + (mf.size if nxt is None else nxt)
                damage.report(base + rel, bad_end, f"{why}: {v.reason}")
                rel = bad_end - base
            pos = base + rel
            if rel >= mf.size:
                pos = mf.end_offset
        finally:
            mf.unpin()
