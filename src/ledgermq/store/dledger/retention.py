"""Retention in DLedger mode: delete expired DLedger data files and what only they needed.

The decision of *whether* a round deletes (deleteWhen, diskMaxUsedSpaceRatio, an
operator's request, the forcible ratio) is the one both modes share (``RetentionRounds``,
store/retention.py); this class only decides *what* goes, as RocketMQ's DLedgerCommitLog hands its settings to
DLedger's CleanSpaceService:

* files expire after fileReservedTime + 1 hours (DLedgerCommitLog passes
  ``fileReservedTime + 1`` as DLedger's fileReservedHours);
* while an old native commit log is still in place (a store switched to DLedger mode,
  below the divided offset), it goes first, all of it (it is sealed: its last segment is
  no active file), and DLedger files wait until it is gone, as RocketMQ does;
* a DLedger data file (never the last) goes only when every entry in it, and the first
  entry after it (the new first index, whose term Raft still needs), is committed *in the
  checkpoint* (so durable and committed on this node, and a restart resumes above it)
  and dispatched to the consume queues;
* ledger guards (``add_guard``) name the lowest DLedger index someone still needs (a Raft
  leader: what its connected followers have not got yet); no file whose removal would
  move the first index past it goes, unless the disk is past the forcible ratio (85%),
  where a full disk would stop the whole group and a lagging follower is given up instead.

After a round the consume queues and the index drop what points below the new minimum
offset, exactly as in native mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.entry import EntryInfo
from ledgermq.store.index import IndexService
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.retention import DELETE_FILES_BATCH_MAX, CleanRound, DiskUsage, RetentionRounds

log = logging.getLogger(__name__)

# The lowest DLedger index the caller still needs stored, or None for "nothing".
LedgerGuard = Callable[[], int | None]


class DLedgerCleanService(RetentionRounds):
    """The shared cleaning rounds, deleting DLedger data files (module docstring)."""

    name = "dledger-clean-files"
    commitlog: DLedgerCommitLog

    def __init__(
        self,
        config: StoreConfig,
        commitlog: DLedgerCommitLog,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        clock: Clock,
        disk_usage: DiskUsage,
        dispatched_to: Callable[[], int],
    ) -> None:
        super().__init__(config, commitlog, queues, index, clock, disk_usage)
        self.dispatched_to = dispatched_to  # the data position the reput has dispatched up to
        self.ledger_guards: list[LedgerGuard] = []
        self._held_by: str | None = None

    def add_guard(self, guard: LedgerGuard) -> None:
        self.ledger_guards.append(guard)

    @property
    def reserved_hours(self) -> float:
        return self.config.file_reserved_time_hours + 1

    def disk_ratio(self) -> float:
        """The fuller of the store root's and the data directory's partitions (DLedger
        checks both storeBaseDir and the data path)."""
        paths = (Path(self.config.root_dir), self.commitlog.ledger_config.data_dir)
        return max((self.disk_usage(p) for p in paths if p.exists()), default=0.0)

    def guard_floor(self) -> int | None:
        needed = [n for n in (g() for g in self.ledger_guards) if n is not None]
        return min(needed) if needed else None

    def delete_files(self, plan: CleanRound) -> int:
        if self.commitlog.old_log.queue.files:
            return self._delete_old_log(plan)
        with self.commitlog.files_lock:  # a driver restart's re-recovery waits for this pass
            return self._delete_ledger_files(plan)

    def _delete_ledger_files(self, plan: CleanRound) -> int:
        ledger = self.commitlog.ledger
        floor = None if plan.critical else self.guard_floor()
        dispatched = self.dispatched_to()
        held: list[str] = []

        def may_delete(mf: MappedFile, head: EntryInfo) -> bool:
            if not plan.expired(mf):
                return False
            if head.index > ledger.committed_index or head.end > dispatched:
                return False  # not committed (durably) or not applied yet: never
            if floor is not None and head.index > floor:
                held.append(f"deleting {mf.path.name} would drop index {floor}")
                return False
            return True

        pause_s = self.config.delete_commitlog_files_interval_ms / 1000
        removed = ledger.delete_leading_files(
            may_delete,
            DELETE_FILES_BATCH_MAX,
            self.config.destroy_mapped_file_interval_forcibly_ms / 1000,
            (lambda: self._stopping.wait(pause_s)) if pause_s > 0 else None,
        )
        self._note_held(held[0] if held else None)
        if removed:
            log.info(
                "retention removed %d DLedger data file(s) (%s); the log now starts at index %d",
                len(removed),
                ", ".join(m.path.name for m in removed),
                ledger.first_index,
            )
        return len(removed)

    def _note_held(self, reason: str | None) -> None:
        if reason is not None and self._held_by is None:
            log.warning("retention holds back expired DLedger data: %s, which a connected member still needs", reason)
        self._held_by = reason

    def _delete_old_log(self, plan: CleanRound) -> int:
        """The sealed native log below the divided offset: every expired segment, the last
        one included (nothing is ever appended to it again)."""
        removed = self.commitlog.old_log.queue.delete_first_while(
            self.paced(plan.expired),
            DELETE_FILES_BATCH_MAX,
            self.config.destroy_mapped_file_interval_forcibly_ms / 1000,
            keep_last=False,
        )
        if removed:
            log.info("retention removed %d segment(s) of the old commit log", len(removed))
        return len(removed)
