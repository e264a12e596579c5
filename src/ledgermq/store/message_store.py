"""The message store facade: what the broker, HA and Raft see of the store.

Lifecycle: ``MessageStore(config).start()`` locks the directory, loads and recovers,
then runs the background services (reput, flush, clean); ``shutdown()`` stops them in
dependency order, flushes everything, writes the checkpoint, removes the abort file and
releases the lock. After an I/O error on the write path the store is *failed*: it refuses
writes (SERVICE_NOT_AVAILABLE) until reopened, and says so once in the log.

Thread-safety: puts may come from any thread (one commit-log lock orders them); reads
(store/reads.py) are lock-free; background services are threads because the store never
touches asyncio.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import FlushDiskType, StoreConfig
from ledgermq.errors import (
    StoreClosedError,
    StoreError,
    StoreFullError,
)
from ledgermq.protocol import message as M
from ledgermq.protocol.names import TOPIC_NAME_PATTERN
from ledgermq.store import encoding, queue_positions
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.commitlog import CommitLog, EncodedMessage
from ledgermq.store.consumequeue import ConsumeQueueTable
from ledgermq.store.damage import FILE_NAME as DAMAGE_FILE
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.config import dledger_store_config
from ledgermq.store.dledger.reput import DLedgerReputService
from ledgermq.store.dledger.retention import DLedgerCleanService, LedgerGuard
from ledgermq.store.dledger.store_recovery import recover_dledger
from ledgermq.store.dledger.writes import DLedgerWrites
from ledgermq.store.encoding import Encoded
from ledgermq.store.flush import AsyncFlushService, ConsumeQueueFlushService, GroupCommitService
from ledgermq.store.index import IndexService
from ledgermq.store.integrity import StoreIntegrity
from ledgermq.store.lockfile import StoreLock
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.open_files import FileLimit, OpenFiles, capacity_for
from ledgermq.store.queue_files import SegmentCreatorService
from ledgermq.store.reads import StoreReads
from ledgermq.store.recovery import RecoveryResult, recover
from ledgermq.store.replication_ops import StoreReplication
from ledgermq.store.reput import ArrivalListener, Arrivals, DispatchHook, ReputService
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.retention import CleanService, DiskUsage, RetentionGuard, disk_usage_ratio
from ledgermq.store.scrub import ScrubService, ScrubSettings
from ledgermq.store.timer.settings import TimerSettings
from ledgermq.util.latency import LatencyHistogram

log = logging.getLogger(__name__)

_GOOD_TOPICS_MAX = 4096
DLEDGER_PUT_REFUSED = "DLedger mode: messages are written through the Raft driver, not put_message"


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class MessageStore(StoreReads, StoreIntegrity, StoreReplication, DLedgerWrites):
    """The store: lifecycle, writes and services here; reads (pulls, offsets, lookups) are
    inherited from ``StoreReads`` (store/reads.py), damaged ranges and repair from
    ``StoreIntegrity`` (store/integrity.py), raw appends, transfer reads and truncation
    for replication from ``StoreReplication`` (store/replication_ops.py), the Raft
    driver's writes in DLedger mode from ``DLedgerWrites`` (store/dledger/writes.py)."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        store_host: M.Host = ("127.0.0.1", 10911),
        disk_usage: DiskUsage = disk_usage_ratio,
    ) -> None:
        self.config = config
        self.clock = clock
        self.store_host = store_host
        self.root = Path(config.root_dir)
        self.delay_levels_ms = config.delay_levels_ms()
        self.timer = TimerSettings.from_store_config(config)  # timer messages (store/timer/)
        self.lock = StoreLock(self.root)
        # DLedger mode (enableDLegerCommitLog): the commit log is the Raft log; puts are refused
        # here (a permanent write fence, so the native put path pays nothing for the mode).
        self.dledger: DLedgerCommitLog | None = None
        if config.enable_dleger_commit_log:
            self.dledger = DLedgerCommitLog(
                config.commitlog_path, config.mapped_file_size_commitlog, clock, dledger_store_config(config)
            )
        self.commitlog: CommitLog = self.dledger or CommitLog(
            config.commitlog_path, config.mapped_file_size_commitlog, clock
        )
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.open_file_budget = capacity_for(FileLimit(soft, hard, None), config.max_open_consume_queue_files)
        self.queues = ConsumeQueueTable(
            config.consume_queue_path, config.mapped_file_size_consume_queue, OpenFiles(self.open_file_budget)
        )
        self.index: IndexService | None = (
            IndexService(config.index_path, config.max_hash_slot_num, config.max_index_num, clock)
            if config.message_index_enable
            else None
        )
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        # Corruption bookkeeping (store/integrity.py): damaged ranges, sealed-segment digests.
        self.damage = DamageRegistry(self.root / DAMAGE_FILE)
        self.queues.damage = self.damage  # explains dispatch gaps (store/queue_gaps.py)
        self.digests = SegmentDigests(self.root / "digests" / "commitlog", config.mapped_file_size_commitlog)
        self.scrub_settings = ScrubSettings(
            config.store_scrub_enable, config.store_scrub_bytes_per_second, config.store_scrub_interval_seconds
        )
        self.scrubber: ScrubService | None = None
        self._repair_lock = threading.Lock()
        self._repair_hints: dict[int, int] = {}
        self.reput: ReputService | None = None
        self.commitlog_flusher: AsyncFlushService | GroupCommitService | None = None
        self.flush_latency = LatencyHistogram()  # commit-log flushes (fsyncs), by the flush thread
        self.queue_flusher: ConsumeQueueFlushService | None = None
        self.segment_creator = SegmentCreatorService(self.queues.creator)
        self.cleaner: CleanService | None = None
        self._disk_usage = disk_usage
        self._listeners: list[ArrivalListener] = []
        self._appender_dispatches = False  # see ``set_appender_dispatches``
        self._dispatch_hooks: list[DispatchHook] = []
        self._good_topics: set[str] = set()  # names that passed the topic rule (a regex per put otherwise)
        self.memory_budget = _total_memory() * config.access_message_in_memory_max_ratio // 100
        self.running = False
        self.failed_reason: str | None = None
        # Why puts are refused for now (a recovering master; for good in DLedger mode).
        self.write_fence: str | None = DLEDGER_PUT_REFUSED if self.dledger is not None else None
        self.recovery: RecoveryResult | None = None
        self.queue_positions_used = False  # this start took a clean stop's queue positions

    # == lifecycle ===================================================================
    def start(self) -> RecoveryResult:
        """Lock, load, recover and start the services; returns what recovery found."""
        self.lock.acquire()
        try:
            last_exit_ok = self.lock.last_exit_ok
            self.checkpoint = Checkpoint.load(self.root / "checkpoint")
            self.damage.load()
            if self.dledger is None:
                self.commitlog.load(self.damage.report)
                self.commitlog.on_truncate = self._forget_truncated
            else:
                self.commitlog.load()
            self.queue_positions_used = queue_positions.load_queues(self.config, self.queues, last_exit_ok)
            rebuild_from = None
            if self.index is not None:
                rebuild_from = self.index.load(last_exit_ok, self.checkpoint.index_ts)
            if self.dledger is not None:
                self.recovery = recover_dledger(
                    self.dledger,
                    self.queues,
                    self.index,
                    self.checkpoint,
                    abnormal=not last_exit_ok,
                    check_crc=self.config.check_crc_on_recover,
                    delay_levels_ms=self.delay_levels_ms,
                    index_rebuild_from=rebuild_from,
                )
            else:
                self.recovery = recover(
                    self.commitlog,
                    self.queues,
                    self.index,
                    self.checkpoint,
                    abnormal=not last_exit_ok,
                    check_crc=self.config.check_crc_on_recover,
                    delay_levels_ms=self.delay_levels_ms,
                    index_rebuild_from=rebuild_from,
                    damage=self.damage,
                    digests=self.digests,
                    durable_only_to_checkpoint=self.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH,
                )
                self._check_derived_at_start(self.recovery, rebuild_from)
            self.lock.mark_running()
            self._start_services(self.recovery.reput_from)
        except BaseException:
            self._close_files()
            self.lock.release()
            raise
        self.running = True
        log.info("store %s started: %s", self.root, self.recovery)
        return self.recovery

    def _start_services(self, reput_from: int) -> None:
        cfg = self.config
        if self.dledger is not None:
            self._start_dledger_services(reput_from)
            return
        self.reput = ReputService(self.commitlog, self.queues, self.index, reput_from, self.delay_levels_ms, self.clock)
        self.reput.listeners = self._listeners
        self.reput.appender_dispatches = self._appender_dispatches
        self.reput.dispatch_hooks = self._dispatch_hooks
        self.reput.damage = self.damage
        self.reput.dispatch_available()  # catch up before serving (normal-recovery rebuild)
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.commitlog_flusher = GroupCommitService(
                self.commitlog, self.checkpoint, self._flush_failed, self.flush_latency
            )
        else:
            self.commitlog_flusher = AsyncFlushService(
                self.commitlog, self.checkpoint, cfg.flush_interval_commitlog_ms, self._flush_failed, self.flush_latency
            )
        self.queue_flusher = ConsumeQueueFlushService(
            self.queues,
            self.index,
            self.checkpoint,
            lambda: self.reput.dispatched_ts if self.reput else 0,
            cfg.flush_interval_consume_queue_ms,
        )
        self.cleaner = CleanService(cfg, self.commitlog, self.queues, self.index, self.clock, self._disk_usage)
        self.scrubber = ScrubService(self.commitlog, self.digests, self.damage, self.scrub_settings, self.clock)
        self.scrubber.derived = self._derived_scrub()
        for svc in (
            self.reput,
            self.segment_creator,
            self.commitlog_flusher,
            self.queue_flusher,
            self.cleaner,
            self.scrubber,
        ):
            svc.start()

    def _start_dledger_services(self, reput_from: int) -> None:
        """DLedger mode: the reput follows committed entries; no commit-log flusher (the
        driver flushes the DLedger files); retention deletes DLedger data files
        (store/dledger/retention.py)."""
        assert self.dledger is not None
        reput = DLedgerReputService(self.dledger, self.queues, self.index, reput_from, self.delay_levels_ms, self.clock)
        reput.listeners = self._listeners
        reput.appender_dispatches = self._appender_dispatches
        reput.dispatch_hooks = self._dispatch_hooks
        self.reput = reput
        self.dledger.on_commit = reput.wakeup
        reput.dispatch_available()
        self._rebuild_queue_offsets(self.dledger)
        self.queue_flusher = ConsumeQueueFlushService(
            self.queues,
            self.index,
            self.checkpoint,
            lambda: reput.dispatched_ts,
            self.config.flush_interval_consume_queue_ms,
        )
        self.cleaner = DLedgerCleanService(
            self.config,
            self.dledger,
            self.queues,
            self.index,
            self.clock,
            self._disk_usage,
            lambda: reput.reput_from,
        )
        for svc in (reput, self.segment_creator, self.queue_flusher, self.cleaner):
            svc.start()

    def shutdown(self) -> None:
        """Stop services (dispatching and flushing what is left), then release the store."""
        if not self.running:
            return
        self.running = False
        # Reput first so every record has its units, then flushers write them down.
        services = [
            s
            for s in (
                self.scrubber,
                self.cleaner,
                self.reput,
                self.segment_creator,
                self.commitlog_flusher,
                self.queue_flusher,
            )
            if s
        ]
        for svc in services:
            svc.stop()
        clean = (
            self.failed_reason is None
            and self.queues.creator.error is None
            and (self.reput is None or (self.reput.stuck_reason is None and self.reput.dispatch_error is None))
            and not any(svc.alive for svc in services)
        )
        if clean:  # after the flushers' last pass, so the checkpoint it names is final
            queue_positions.save_queues(self.config, self.queues)
        self._close_files()
        if clean:
            self.lock.mark_clean_exit()
        self.lock.release()

    def _forget_truncated(self, offset: int) -> None:
        """Bytes from ``offset`` on were cut: their damage and their segments' digests go too."""
        self.damage.drop_from(offset)
        self.digests.forget_from(offset)

    def _close_files(self) -> None:
        self.commitlog.close()
        self.queues.close()
        if self.index is not None:
            self.index.close()

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _fail(self, reason: str) -> None:
        if self.failed_reason is None:
            self.failed_reason = reason
            log.error("store failed, refusing writes until reopened: %s", reason)

    def _flush_failed(self, exc: OSError) -> None:
        """A commit-log fsync failed (from a flush thread). Sticky: after a failed fsync the
        kernel may have dropped the dirty pages and a retry can report success for data that
        is gone ("fsyncgate"), so the store refuses writes until it is reopened and recovered."""
        self._fail(f"commit-log flush failed: {exc}")

    def fence_writes(self, reason: str | None) -> None:
        """Refuse puts with ``reason`` (SERVICE_NOT_AVAILABLE) until called with None.

        A master that restarted after a crash fences itself until it has taken back from
        its slave what it may have lost (ha/epochs.py)."""
        if self.dledger is not None:
            return  # puts stay refused in DLedger mode
        if reason != self.write_fence:
            log.info("store writes %s", f"fenced: {reason}" if reason else "open")
        self.write_fence = reason

    # == writes ======================================================================
    def put_message(self, msg: MessageInput) -> PutResult:
        """Append one message. Under SYNC_FLUSH the result carries ``flush_future``."""
        refused = self._refuse_put(msg.topic, len(msg.body), msg.queue_id) or self._refuse_text(msg.properties)
        if refused is not None:
            return refused
        encoded = self.encode_message(msg)
        if isinstance(encoded, PutResult):
            return encoded
        return self._append(*encoded)

    def encode_message(self, msg: MessageInput) -> Encoded | PutResult:
        """The stored record of ``msg`` (store/encoding.py); shared by native puts and
        DLedger mode's proposals."""
        return encoding.encode_message(msg, self.store_host, self.delay_levels_ms, self.timer, self.clock.wall_ms())

    def put_messages(self, batch: BatchInput) -> PutResult:
        """Append a batch contiguously with consecutive queue offsets."""
        total_body = sum(len(b) for _, b, _ in batch.entries)
        refused = self._refuse_put(batch.topic, total_body, batch.queue_id)
        for _flag, _body, props in batch.entries:
            refused = refused or self._refuse_text(props)
        if refused is not None:
            return refused
        encoded = self.encode_batch(batch)
        if isinstance(encoded, PutResult):
            return encoded
        return self._append(*encoded)

    def encode_batch(self, batch: BatchInput) -> Encoded | PutResult:
        """The stored records of a batch (store/encoding.py)."""
        return encoding.encode_batch(batch, self.store_host)

    def check_for_proposal(self, msg: MessageInput | BatchInput) -> PutResult | None:
        """DLedger mode: what ``put_message`` would refuse about ``msg`` itself (size, topic,
        queue, properties), before a leader proposes it; the store's own fence does not apply."""
        if isinstance(msg, MessageInput):
            return self._refuse_put(msg.topic, len(msg.body), msg.queue_id, proposal=True) or self._refuse_text(
                msg.properties
            )
        refused = self._refuse_put(msg.topic, sum(len(b) for _, b, _ in msg.entries), msg.queue_id, proposal=True)
        for _flag, _body, props in msg.entries:
            refused = refused or self._refuse_text(props)
        return refused

    def _refuse_put(self, topic: str, body_size: int, queue_id: int = 0, *, proposal: bool = False) -> PutResult | None:
        if not self.running or self.failed_reason is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.failed_reason or "store is not running")
        if self.reput is not None and self.reput.dispatch_error is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.reput.dispatch_error)
        if self.queues.creator.error is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.queues.creator.error)
        if proposal:
            pass  # a Raft leader's proposal: its role, not the store's config, decides
        elif self.config.is_slave:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="a slave does not accept puts")
        elif self.write_fence is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.write_fence)
        if self.cleaner is not None and self.cleaner.disk_full:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="disk is full")
        if body_size > self.config.max_message_size:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"body is {body_size} bytes, maxMessageSize is {self.config.max_message_size}",
            )
        # Topics become directory names under consumequeue/: RocketMQ's topic rule (protocol.names).
        if topic not in self._good_topics:
            if not topic or len(topic.encode()) > M.MAX_TOPIC_BYTES or not TOPIC_NAME_PATTERN.fullmatch(topic):
                return PutResult(
                    PutStatus.MESSAGE_ILLEGAL, remark=f"topic {topic!r} must be 1..127 characters of [%|a-zA-Z0-9_-]"
                )
            if len(self._good_topics) >= _GOOD_TOPICS_MAX:
                self._good_topics.clear()
            self._good_topics.add(topic)
        if queue_id < 0:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"queue id {queue_id} is negative")
        return None

    def _refuse_text(self, props: dict[str, str]) -> PutResult | None:
        """NUL in properties is refused: recovery reads it as the mark of a torn write."""
        for k, v in props.items():
            if "\x00" in k or "\x00" in v:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"property {k!r} contains a NUL character")
        return None

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
            self._fail(f"commit-log append failed: {exc}")
            return PutResult(PutStatus.UNKNOWN_ERROR, remark=str(exc))
        if self.reput is not None:
            self.reput.after_append()
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
            durable = result.flush_future.result(self.config.sync_flush_timeout_ms / 1000)
        except (FutureTimeout, OSError):  # an OSError: the flusher already failed the store
            durable = False
        if not durable:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        return result

    def put_message_sync(self, msg: MessageInput) -> PutResult:
        return self.wait_for_flush(self.put_message(msg))

    def put_messages_sync(self, batch: BatchInput) -> PutResult:
        return self.wait_for_flush(self.put_messages(batch))

    # == services ====================================================================
    def set_appender_dispatches(self, enabled: bool) -> None:
        """With ``enabled``, appends do not wake the reput thread: the appender promises to
        call ``dispatch_appended`` after them (a broker does, once per turn of its event loop;
        broker/write_turn). The store keeps no loop or thread of the appender's: an append
        nobody dispatches is still found by the reput thread's poll."""
        self._appender_dispatches = enabled
        if self.reput is not None:
            self.reput.appender_dispatches = enabled

    def dispatch_appended(self) -> Arrivals:
        """Dispatch, on the calling thread, what was appended (see ``ReputService.dispatch_appended``);
        returns the queues that grew, whose arrival listeners are left to the caller."""
        return self.reput.dispatch_appended() if self.reput is not None else {}

    def add_dispatch_hook(self, hook: DispatchHook) -> None:
        """Called with every dispatched record (its DispatchRequest, properties text
        included), after its consume-queue unit is written: on the reput thread, or on
        the thread that calls ``dispatch_appended``."""
        self._dispatch_hooks.append(hook)

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Called with (topic, queue id, new max offset) from the reput thread's passes
        (never from ``dispatch_appended``, whose caller gets the queues instead)."""
        self._listeners.append(listener)

    def add_retention_guard(self, guard: RetentionGuard) -> None:
        """Keep every commit-log segment ending beyond ``guard()`` (an offset; None: nothing)."""
        if self.dledger is not None:
            raise StoreError("DLedger mode guards Raft indices: use add_ledger_guard")
        if self.cleaner is None:
            raise StoreError("start the store before adding retention guards")
        self.cleaner.guards.append(guard)

    def add_ledger_guard(self, guard: LedgerGuard) -> None:
        """DLedger mode: keep the entry at DLedger index ``guard()`` and everything after it
        (None: nothing), unless the disk is past the forcible ratio."""
        if not isinstance(self.cleaner, DLedgerCleanService):
            raise StoreError("ledger guards need a started store in DLedger mode")
        self.cleaner.add_guard(guard)

    def ledger_guards(self) -> list[LedgerGuard]:
        """The ledger guards registered so far (empty outside DLedger mode)."""
        return list(self.cleaner.ledger_guards) if isinstance(self.cleaner, DLedgerCleanService) else []

    def trigger_delete_files(self) -> None:
        if self.cleaner is not None:
            self.cleaner.trigger()

    def wait_dispatched(self, offset: int | None = None, timeout: float = 10.0) -> bool:
        """Wait until the consume queues cover the commit log up to ``offset`` (default: all)
        and every queue file they need exists (tests and tools look at the files)."""
        if self.reput is None:
            return False
        if not self.reput.wait_for(self.commitlog.max_offset if offset is None else offset, timeout):
            return False
        self.queues.creator.drain()
        return self.queues.creator.error is None

    @property
    def dispatch_problem(self) -> str | None:
        """Why stored messages cannot be made readable (or durable in their queues) right
        now, or None; puts are refused while it is set."""
        return (self.reput.dispatch_error if self.reput else None) or self.queues.creator.error

    @property
    def dispatch_failures(self) -> int:
        return (self.reput.dispatch_failures if self.reput else 0) + self.queues.creator.failures

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.commitlog.max_offset - (self.reput.reput_from if self.reput else 0)

    def runtime_info(self) -> dict[str, str]:
        """A few numbers for GET_BROKER_RUNTIME_INFO and `ledgermq store inspect`."""
        return {
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogFlushedOffset": str(self.flushed_phy_offset),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes),
            "consumeQueues": str(len(self.queues.all())),
            "consumeQueueOpenFiles": f"{self.queues.open_files.open_count}/{self.open_file_budget}",
            "dispatchError": self.dispatch_problem or "",
            "consumeQueueFilesPending": str(self.queues.creator.backlog),
            "storeFailed": self.failed_reason or "",
            "writeFence": self.write_fence or "",
            **self.integrity_info(),
        }
