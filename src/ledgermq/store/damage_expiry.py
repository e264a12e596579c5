"""Damaged commit-log bytes the group has expired: a slave lets them go, as retention would.

A slave's damaged range is repaired from its master's bytes (ha/slave_repair.py), unless
the master no longer holds them: its retention deleted those segments. Then no replica
will ever hold them again, and keeping the range damaged would refuse reads of it forever
and have the master refuse it again at every handshake. RocketMQ's answer for bytes
retention deleted is that they are gone: a pull below a queue's minimum offset is told to
move on (OFFSET_TOO_SMALL, PULL_OFFSET_MOVED). So the slave deletes its leading segments
up to the one holding the last such range, exactly as its retention deletes segments (the
commit log's start record first, then the file; then the consume-queue and index files
that only pointed there, and every queue's minimum offset moves past them), and forgets
the damage.

What may go is bounded by the master's word: only segments that end at or below the log
start the master reported (nothing the master still holds is ever dropped), and only
leading ones up to the last damaged range below it (healthy segments after it stay until
the slave's own retention takes them).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ledgermq.store.commitlog import CommitLog
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.retention import RetentionRounds

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExpiredDamage:
    """What ``expire_damage_below`` let go."""

    ranges: tuple[tuple[int, int], ...]  # damaged ranges forgotten
    segments: tuple[str, ...]  # segment files deleted
    log_start: int  # where this commit log starts now

    @property
    def damaged_bytes(self) -> int:
        return sum(b - a for a, b in self.ranges)


def expire_damage_below(
    commitlog: CommitLog,
    damage: DamageRegistry,
    digests: SegmentDigests,
    cleaner: RetentionRounds | None,
    group_start: int,
    why: str,
    force_after_s: float,
) -> ExpiredDamage | None:
    """Delete the leading segments that hold damaged ranges lying wholly below
    ``group_start`` (where the group's master says its log starts) and end at or below it;
    forget those ranges. None when no such range exists. Runs under the retention's lock
    (``cleaner.round_lock``), so it never races a cleaning round over the same files."""
    with cleaner.round_lock if cleaner is not None else threading.Lock():
        size = commitlog.queue.file_size
        # A range goes only with the segment holding its last byte, which must end at or below group_start.
        below = [(a, b) for a, b in damage.ranges() if (b - 1) // size * size + size <= group_start]
        if not below:
            return None
        last_end = below[-1][1]
        removed = commitlog.queue.delete_first_while(
            lambda mf: mf.end_offset <= group_start and mf.start_offset < last_end,
            len(commitlog.queue.files),
            force_after_s,
        )
        start = commitlog.min_offset
        digests.forget_before(start)
        damage.drop_before(start)
        if cleaner is not None:
            cleaner.clean_derived()
    gone = tuple((a, b) for a, b in below if b <= start)
    if not gone:
        log.error(
            "damaged commit log %s lies below the group's log start %d (%s) but its segments could not be "
            "deleted yet; it stays refused",
            ", ".join(f"[{a}, {b})" for a, b in below),
            group_start,
            why,
        )
        return None
    log.error(
        "damaged commit log %s was expired by the group (%s): no replica will hold it again. Let go as retention "
        "would: deleted segment(s) %s; the commit log now starts at %d, and pulls below a queue's new minimum "
        "are told to move on",
        ", ".join(f"[{a}, {b})" for a, b in gone),
        why,
        ", ".join(m.path.name for m in removed) or "none",
        start,
    )
    return ExpiredDamage(gone, tuple(m.path.name for m in removed), start)
