"""Retention: delete old commit-log segments, then the queue and index files they orphan.

A segment (never the active last one) is deleted when it is older than fileReservedTime
and it is time to clean (the hour is in deleteWhen, the disk is fuller than
diskMaxUsedSpaceRatio, or an operator asked for it); when the disk is past the forcible
ratio (85%), age no longer matters. Two things always protect a segment:

* retention guards: callbacks returning an offset someone still needs (a slave's
  replication position, a consumer's); no segment ending beyond the lowest one goes;
* readers holding the segment (``MappedFile.pin``): deletion waits for them, up to
  destroyMapedFileIntervalForcibly.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig, parse_delete_when
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.consumequeue import ConsumeQueueTable
from ledgermq.store.index import IndexService
from ledgermq.store.mapped_file import MappedFile
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

RetentionGuard = Callable[[], int | None]
DiskUsage = Callable[[Path], float]
FORCIBLE_RATIO = 0.85
DELETE_FILES_BATCH_MAX = 10
MANUAL_DELETE_ROUNDS = 20
DISK_FULL_RATIO = 0.90  # above this the store refuses puts until space comes back


def _paced(
    condition: Callable[[MappedFile], bool], pause_s: float, wait: Callable[[float], bool]
) -> Callable[[MappedFile], bool]:
    """``condition`` with a pause (deleteCommitLogFilesInterval) before every deletion but
    the first, so a big cleanup does not hit the disk all at once."""
    first = True

    def check(mf: MappedFile) -> bool:
        nonlocal first
        if not condition(mf):
            return False
        if not first:
            wait(pause_s)
        first = False
        return True

    return check


def disk_usage_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class CleanService(ServiceThread):
    name = "clean-files"

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        clock: Clock,
        disk_usage: DiskUsage = disk_usage_ratio,
    ) -> None:
        super().__init__(config.clean_resource_interval_ms / 1000)
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.clock = clock
        self.disk_usage = disk_usage
        self.guards: list[RetentionGuard] = []
        self.manual_requests = 0
        self.disk_full = False
        self.delete_hours = parse_delete_when(config.delete_when)

    def trigger(self) -> None:
        """An operator's TRIGGER_DELETE_FILES: cleaning rounds regardless of the hour.

        Like RocketMQ (MAX_MANUAL_DELETE_FILE_TIMES) one request buys 20 rounds, each
        deleting at most 10 expired segments.
        """
        self.manual_requests = MANUAL_DELETE_ROUNDS
        self.wakeup()

    def step(self) -> None:
        self.clean_once()

    def protected_from(self) -> int | None:
        needed = [g() for g in self.guards]
        live = [n for n in needed if n is not None]
        return min(live) if live else None

    def clean_once(self) -> int:
        """One round; returns how many commit-log segments were deleted."""
        ratio = self.disk_usage(self.commitlog.queue.directory) if self.commitlog.queue.files else 0.0
        self._update_disk_full(ratio)
        hour = dt.datetime.fromtimestamp(self.clock.wall_ms() / 1000).hour
        time_up = hour in self.delete_hours
        space_full = ratio > self.config.disk_max_used_space_ratio / 100
        forcibly = ratio > FORCIBLE_RATIO
        manual = self.manual_requests > 0
        if manual:
            self.manual_requests -= 1
        if not (time_up or space_full or manual):
            return 0
        reserved_s = self.config.file_reserved_time_hours * 3600
        now_s = self.clock.wall_ms() / 1000
        floor = self.protected_from()

        def deletable(mf: MappedFile) -> bool:
            if floor is not None and mf.end_offset > floor:
                return False
            return forcibly or now_s - mf.last_modified() >= reserved_s

        pause_s = self.config.delete_commitlog_files_interval_ms / 1000
        paced = _paced(deletable, pause_s, self._stopping.wait) if pause_s > 0 else deletable
        removed = self.commitlog.queue.delete_first_while(
            paced,
            DELETE_FILES_BATCH_MAX,
            self.config.destroy_mapped_file_interval_forcibly_ms / 1000,
        )
        if removed:
            log.info(
                "retention removed %d commit-log segment(s): %s",
                len(removed),
                ", ".join(m.path.name for m in removed),
            )
        self.clean_derived()
        return len(removed)

    def _update_disk_full(self, ratio: float) -> None:
        full = ratio > DISK_FULL_RATIO
        if full and not self.disk_full:
            log.error("disk %.0f%% full: refusing puts until retention frees space", ratio * 100)
        elif self.disk_full and not full:
            log.warning("disk back to %.0f%%: accepting puts again", ratio * 100)
        self.disk_full = full

    def clean_derived(self) -> None:
        """Drop consume-queue and index files that only point at deleted segments."""
        low = self.commitlog.min_offset
        for cq in self.queues.all():
            cq.delete_expired(low)
            cq.correct_min_offset(low)
        if self.index is not None:
            self.index.delete_expired(low)
