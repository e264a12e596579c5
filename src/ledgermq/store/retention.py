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
import threading
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig, parse_delete_when
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.index import IndexService
from ledgermq.store.log_reads import LogReads
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.queue_table import ConsumeQueueTable
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


@dataclass(frozen=True, slots=True)
class CleanRound:
    """What one cleaning round may delete: files older than ``reserved_s`` as of ``now_s``,
    or of any age when ``forcibly``. ``critical``: the disk is past the forcible ratio."""

    now_s: float
    reserved_s: float
    forcibly: bool
    critical: bool

    def expired(self, mf: MappedFile) -> bool:
        return self.forcibly or self.now_s - mf.last_modified() >= self.reserved_s


def disk_usage_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class RetentionRounds(ServiceThread):
    """The cleaning rounds both modes share: when a round runs and by which rule, the
    disk-full flag, and dropping consume-queue and index files below the log's start. A
    subclass says which files go (``delete_files``) and which disk counts (``disk_ratio``):
    commit-log segments here, DLedger data files in store/dledger/retention.py."""

    name = "clean-files"
    commitlog: LogReads

    def __init__(
        self,
        config: StoreConfig,
        commitlog: LogReads,
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
        self.manual_requests = 0
        self.disk_full = False
        self.delete_hours = parse_delete_when(config.delete_when)
        self.round_lock = threading.Lock()
        """Held while a round deletes files; whoever else deletes leading segments (a slave
        letting go of damage its group expired, store/damage_expiry.py) takes it too."""

    def trigger(self) -> None:
        """An operator's TRIGGER_DELETE_FILES: cleaning rounds regardless of the hour.

        Like RocketMQ (MAX_MANUAL_DELETE_FILE_TIMES) one request buys 20 rounds, each
        deleting at most 10 expired segments.
        """
        self.manual_requests = MANUAL_DELETE_ROUNDS
        self.wakeup()

    def step(self) -> None:
        self.clean_once()

    def plan_round(self) -> CleanRound | None:
        """Whether this round deletes anything, and by which rule (None: not time to clean).

        The decision RocketMQ's clean services share: a round runs when the hour is in
        deleteWhen, the disk is fuller than diskMaxUsedSpaceRatio, or an operator asked;
        past the forcible ratio (85%) age no longer matters (cleanFileForciblyEnable)."""
        ratio = self.disk_ratio()
        self._update_disk_full(ratio)
        hour = dt.datetime.fromtimestamp(self.clock.wall_ms() / 1000).hour
        time_up = hour in self.delete_hours
        space_full = ratio > self.config.disk_max_used_space_ratio / 100
        critical = ratio > FORCIBLE_RATIO
        manual = self.manual_requests > 0
        if manual:
            self.manual_requests -= 1
        if not (time_up or space_full or manual):
            return None
        return CleanRound(
            now_s=self.clock.wall_ms() / 1000,
            reserved_s=self.reserved_hours * 3600,
            forcibly=critical and self.config.clean_file_forcibly_enable,
            critical=critical,
        )

    @property
    def reserved_hours(self) -> float:
        return self.config.file_reserved_time_hours

    @abstractmethod
    def disk_ratio(self) -> float:
        """Used/total of the partition the files to delete live on."""

    @abstractmethod
    def delete_files(self, plan: CleanRound) -> int:
        """Delete what ``plan`` lets go; returns how many files were deleted."""

    def paced(self, condition: Callable[[MappedFile], bool]) -> Callable[[MappedFile], bool]:
        """``condition`` with deleteCommitLogFilesInterval between deletions."""
        pause_s = self.config.delete_commitlog_files_interval_ms / 1000
        return _paced(condition, pause_s, self._stopping.wait) if pause_s > 0 else condition

    def clean_once(self) -> int:
        """One round; returns how many commit-log segments were deleted."""
        plan = self.plan_round()
        if plan is None:
            return 0
        with self.round_lock:
            removed = self.delete_files(plan)
            self.clean_derived()
        return removed

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


class CleanService(RetentionRounds):
    """Retention of native commit-log segments, behind the retention guards (offsets a
    connected slave still needs)."""

    commitlog: CommitLog

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        clock: Clock,
        disk_usage: DiskUsage = disk_usage_ratio,
    ) -> None:
        super().__init__(config, commitlog, queues, index, clock, disk_usage)
        self.guards: list[RetentionGuard] = []

    def protected_from(self) -> int | None:
        needed = [g() for g in self.guards]
        live = [n for n in needed if n is not None]
        return min(live) if live else None

    def disk_ratio(self) -> float:
        return self.disk_usage(self.commitlog.queue.directory) if self.commitlog.queue.files else 0.0

    def delete_files(self, plan: CleanRound) -> int:
        """Delete expired leading commit-log segments no retention guard protects."""
        floor = self.protected_from()

        def deletable(mf: MappedFile) -> bool:
            if floor is not None and mf.end_offset > floor:
                return False
            return plan.expired(mf)

        removed = self.commitlog.queue.delete_first_while(
            self.paced(deletable),
            DELETE_FILES_BATCH_MAX,
            self.config.destroy_mapped_file_interval_forcibly_ms / 1000,
        )
        if removed:
            log.info(
                "retention removed %d commit-log segment(s): %s",
                len(removed),
                ", ".join(m.path.name for m in removed),
            )
        return len(removed)
