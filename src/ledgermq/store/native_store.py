"""The message store with its own commit log (RocketMQ's DefaultMessageStore, native mode).

``NativeMessageStore`` is what a master, a slave and a controller-mode replica run: puts
append to the commit log, an HA slave appends its master's bytes at the same offsets, and
realignment truncates by commit-log offset. Its parts beyond the shared ones
(store/facade.py) are collaborators it holds and forwards to: ``StoreIntegrity`` (damaged
ranges, scrub, repair; store/integrity.py) and ``StoreReplication`` (raw appends, transfer
reads, truncation; store/replication_ops.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import FlushDiskType, StoreConfig
from ledgermq.errors import StoreClosedError, StoreError, StoreFullError
from ledgermq.protocol import message as M
from ledgermq.store.commitlog import CommitLog, EncodedMessage
from ledgermq.store.core import StoreCore
from ledgermq.store.damage_expiry import ExpiredDamage, expire_damage_below
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.facade import StoreFacade
from ledgermq.store.flush import AsyncFlushService, GroupCommitService
from ledgermq.store.integrity import StoreIntegrity
from ledgermq.store.log_start import FILE_NAME as LOG_START_FILE
from ledgermq.store.log_start import LogStartRecord
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.recovery import RecoveryResult, recover
from ledgermq.store.replication_ops import StoreReplication
from ledgermq.store.reput import ReputService
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.retention import CleanService, DiskUsage, RetentionGuard, disk_usage_ratio
from ledgermq.store.scrub import ScrubService
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

SLAVE_FENCE = "a slave does not accept puts"


class NativeMessageStore(StoreFacade[CommitLog, ReputService, CleanService]):
    """A store over a native commit log (module docstring). Refuses a config in DLedger
    mode: that store is ``DLedgerMessageStore`` (``open_message_store`` picks by config)."""

    reput_type = ReputService
    cleaner_type = CleanService

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        store_host: M.Host = ("127.0.0.1", 10911),
        disk_usage: DiskUsage = disk_usage_ratio,
    ) -> None:
        if config.enable_dleger_commit_log:
            raise StoreError("enableDLegerCommitLog=true: the store is a DLedgerMessageStore, not a native one")
        core = StoreCore(config, clock=clock, store_host=store_host, disk_usage=disk_usage)
        start = LogStartRecord(Path(config.root_dir) / LOG_START_FILE)
        super().__init__(core, CommitLog(config.commitlog_path, config.mapped_file_size_commitlog, clock, start))
        self.integrity = StoreIntegrity(core, self.commitlog)
        self.replication = StoreReplication(core, self.commitlog)
        self.commitlog_flusher: AsyncFlushService | GroupCommitService | None = None
        # Why puts are refused for now (a master that restarted after a crash; ha/epochs.py).
        self.write_fence: str | None = None

    # == lifecycle (StoreFacade.start) =================================================
    def _load_log(self) -> None:
        self.commitlog.load(self.core.damage.report)
        self.commitlog.on_truncate = self._forget_truncated

    def _recover(self, last_exit_ok: bool, index_rebuild_from: int | None) -> RecoveryResult:
        core = self.core
        recovery = recover(
            self.commitlog,
            core.queues,
            core.index,
            core.checkpoint,
            abnormal=not last_exit_ok,
            check_crc=core.config.check_crc_on_recover,
            delay_levels_ms=core.delay_levels_ms,
            index_rebuild_from=index_rebuild_from,
            damage=core.damage,
            digests=self.digests,
            durable_only_to_checkpoint=core.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH,
        )
        self.integrity.check_derived_at_start(recovery, index_rebuild_from)
        return recovery

    def _start_services(self, reput_from: int) -> None:
        core, cfg = self.core, self.core.config
        reput = ReputService(self.commitlog, core.queues, core.index, reput_from, core.delay_levels_ms, core.clock)
        reput.damage = core.damage
        core.wire_reput(reput)
        reput.dispatch_available()  # catch up before serving (normal-recovery rebuild)
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.commitlog_flusher = GroupCommitService(
                self.commitlog, core.checkpoint, self._flush_failed, core.flush_latency
            )
        else:
            self.commitlog_flusher = AsyncFlushService(
                self.commitlog, core.checkpoint, cfg.flush_interval_commitlog_ms, self._flush_failed, core.flush_latency
            )
        core.start_queue_flusher(reput)
        core.cleaner = CleanService(cfg, self.commitlog, core.queues, core.index, core.clock, core.disk_usage)
        scrubber = ScrubService(self.commitlog, self.digests, core.damage, core.scrub_settings, core.clock)
        scrubber.derived = self.integrity.derived_scrub()
        self.integrity.scrubber = scrubber
        for svc in (reput, core.segment_creator, self.commitlog_flusher, core.queue_flusher, core.cleaner, scrubber):
            assert svc is not None
            svc.start()

    def services(self) -> Sequence[ServiceThread | None]:
        core = self.core
        return (
            self.scrubber,
            core.cleaner,
            core.reput,
            core.segment_creator,
            self.commitlog_flusher,
            core.queue_flusher,
        )

    def _forget_truncated(self, offset: int) -> None:
        """Bytes from ``offset`` on were cut: their damage and their segments' digests go too."""
        self.core.damage.drop_from(offset)
        self.digests.forget_from(offset)

    def _flush_failed(self, exc: OSError) -> None:
        """A commit-log fsync failed (from a flush thread). Sticky: after a failed fsync the
        kernel may have dropped the dirty pages and a retry can report success for data that
        is gone ("fsyncgate"), so the store refuses writes until it is reopened and recovered."""
        self.core.fail(f"commit-log flush failed: {exc}")

    @property
    def digests(self) -> SegmentDigests:
        return self.integrity.digests

    @property
    def scrubber(self) -> ScrubService | None:
        return self.integrity.scrubber

    def fence_writes(self, reason: str | None) -> None:
        """Refuse puts with ``reason`` (SERVICE_NOT_AVAILABLE) until called with None.

        A master that restarted after a crash fences itself until it has taken back from
        its slave what it may have lost (ha/epochs.py)."""
        if reason != self.write_fence:
            log.info("store writes %s", f"fenced: {reason}" if reason else "open")
        self.write_fence = reason

    # == puts ========================================================================
    def put_message(self, msg: MessageInput) -> PutResult:
        """Append one message. Under SYNC_FLUSH the result carries ``flush_future``."""
        core = self.core
        refused = core.refuse_message(msg, SLAVE_FENCE if core.config.is_slave else self.write_fence)
        if refused is not None:
            return refused
        encoded = self.encode_message(msg)
        if isinstance(encoded, PutResult):
            return encoded
        return self._append(*encoded)

    def put_messages(self, batch: BatchInput) -> PutResult:
        """Append a batch contiguously with consecutive queue offsets."""
        core = self.core
        refused = core.refuse_batch(batch, SLAVE_FENCE if core.config.is_slave else self.write_fence)
        if refused is not None:
            return refused
        encoded = self.encode_batch(batch)
        if isinstance(encoded, PutResult):
            return encoded
        return self._append(*encoded)

    def _append(self, encoded: list[EncodedMessage], topic: str, queue_id: int, wait: bool) -> PutResult:
        try:
            result = self.commitlog.append(encoded, topic, queue_id)
        except StoreFullError as exc:
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, remark=str(exc))
        except StoreClosedError as exc:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=str(exc))
        except StoreError as exc:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
        except OSError as exc:
            self.core.fail(f"commit-log append failed: {exc}")
            return PutResult(PutStatus.UNKNOWN_ERROR, remark=str(exc))
        reput = self.core.reput
        if reput is not None:
            reput.after_append()
        flusher = self.commitlog_flusher
        if isinstance(flusher, GroupCommitService):
            if wait and flusher.on_flushed is None:
                return PutResult(PutStatus.PUT_OK, result, flush_future=flusher.submit(result.next_offset))
            flusher.wakeup()
            if wait:  # the listener of report_flushes tells the waiter
                return PutResult(PutStatus.PUT_OK, result, durable_at=result.next_offset)
        return PutResult(PutStatus.PUT_OK, result)

    def report_flushes(self, listener: Callable[[int, OSError | None], None]) -> bool:
        """SYNC_FLUSH: tell ``listener`` (flush thread) the durable offset or the failure after
        every fsync; a waiting put then carries ``durable_at``, not a future. False: ASYNC_FLUSH."""
        flusher = self.commitlog_flusher
        if not isinstance(flusher, GroupCommitService):
            return False
        flusher.on_flushed = listener
        return True

    def wait_for_flush(self, result: PutResult) -> PutResult:
        """Block until a SYNC_FLUSH put is durable, or turn it into FLUSH_DISK_TIMEOUT."""
        flusher = self.commitlog_flusher
        if result.durable_at is not None and isinstance(flusher, GroupCommitService):
            result.flush_future = flusher.submit(result.durable_at)  # a thread's wait, not the listener's
            result.durable_at = None
        if result.flush_future is None:
            return result
        try:
            durable = result.flush_future.result(self.core.config.sync_flush_timeout_ms / 1000)
        except (FutureTimeout, OSError):  # an OSError: the flusher already failed the store
            durable = False
        if not durable:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        return result

    def put_message_sync(self, msg: MessageInput) -> PutResult:
        return self.wait_for_flush(self.put_message(msg))

    def put_messages_sync(self, batch: BatchInput) -> PutResult:
        return self.wait_for_flush(self.put_messages(batch))

    def add_retention_guard(self, guard: RetentionGuard) -> None:
        """Keep every commit-log segment ending beyond ``guard()`` (an offset; None: nothing)."""
        self.started_cleaner().guards.append(guard)

    # == replication by commit-log offset (store/replication_ops.py) ==================
    def append_raw(self, offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        """Append a master's commit-log bytes at ``offset`` (= our max offset)."""
        self.replication.append_raw(offset, data)

    def adopt_raw_tail(self, timeout: float = 60.0) -> None:
        """After taking records back with ``append_raw``: dispatch them, continue queue offsets."""
        self.replication.adopt_raw_tail(timeout)

    def hold_dispatch_while(self, hold: Callable[[], bool] | None) -> None:
        """Pause background dispatch while ``hold()`` is True (a replica's bulk copy)."""
        self.replication.hold_dispatch_while(hold)

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        """Commit-log bytes from ``offset`` within one segment (HA transfer)."""
        return self.replication.read_commitlog(offset, max_bytes)

    def truncate_after_offset(self, offset: int) -> None:
        """Drop commit-log bytes from ``offset`` on, and the units that point there (online)."""
        self.replication.truncate_after_offset(offset)

    def whole_records_end(self, start: int | None = None) -> int:
        """The end of the last whole record in the commit log, walking from ``start``."""
        return self.replication.whole_records_end(start)

    # == damaged ranges and repair (store/integrity.py) ================================
    def damaged_ranges(self) -> list[tuple[int, int]]:
        """Commit-log ranges known corrupt and not yet repaired (sorted, disjoint)."""
        return self.integrity.damaged_ranges()

    def report_damage(self, start: int, end: int, reason: str) -> bool:
        """Register corruption someone found in [start, end); True if it was new."""
        return self.integrity.report_damage(start, end, reason)

    def add_damage_listener(self, listener: Callable[[int, int, str], None]) -> None:
        """``listener(start, end, reason)`` for every newly registered range (thread-safe)."""
        self.integrity.add_damage_listener(listener)

    def repair_range(self, start: int, data: bytes | memoryview, source: str) -> None:
        """Overwrite [start, start + len(data)) with a healthy replica's bytes (validated first)."""
        self.integrity.repair_range(start, data, source)

    def expire_damage_below(self, group_start: int, why: str) -> ExpiredDamage | None:
        """Let go of damaged ranges wholly below ``group_start``, the log start the group's
        master reported: delete the leading segments holding them (never one ending above
        ``group_start``) as retention would, and forget them (store/damage_expiry.py)."""
        core = self.core
        return expire_damage_below(
            self.commitlog,
            core.damage,
            self.digests,
            core.cleaner,
            group_start,
            why,
            core.config.destroy_mapped_file_interval_forcibly_ms / 1000,
        )

    def runtime_info(self) -> dict[str, str]:
        return {**super().runtime_info(), "writeFence": self.write_fence or "", **self.integrity.scrub_info()}
