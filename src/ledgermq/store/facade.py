"""What a message store offers in either mode: lifecycle, reads, dispatch, listeners.

``StoreFacade`` is the common base of ``NativeMessageStore`` (store/native_store.py) and
``DLedgerMessageStore`` (store/dledger/mode_store.py). It holds the shared parts
(``StoreCore``) and the read side (``StoreReads``) and forwards to them, typed by the
mode's commit log, dispatch and retention services (its type parameters), so a mode
declares only what is its own; it has no write method, so neither mode inherits one it
would have to refuse. The checks a message must pass before it is written are the core's
(``refuse_message``, ``refuse_batch``), the same for a put and a Raft proposal. Each mode adds its own
writes, named by what they take: a native store appends messages and raw bytes and
truncates by commit-log offset; a DLedger-mode store appends, commits and truncates Raft
entries by index.

Lifecycle: ``start()`` locks the directory, loads and recovers, then runs the background
services; ``shutdown()`` stops them in dependency order, flushes everything, writes the
checkpoint, removes the abort file and releases the lock. After an I/O error on the write
path the store is *failed*: it refuses writes (SERVICE_NOT_AVAILABLE) until reopened, and
says so once in the log.

Thread-safety: writes may come from any thread (one commit-log lock orders them); reads
are lock-free; background services are threads because the store never touches asyncio.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, Self, TypeVar

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.errors import StoreError
from ledgermq.protocol import message as M
from ledgermq.store import encoding, queue_positions
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.core import StoreCore
from ledgermq.store.damage import DamageRegistry, DamageSummary
from ledgermq.store.dispatch_hooks import DispatchHook, PropertyHook
from ledgermq.store.dispatch_host import Arrivals
from ledgermq.store.encoding import Encoded
from ledgermq.store.flush import ConsumeQueueFlushService
from ledgermq.store.index import IndexService
from ledgermq.store.lockfile import StoreLock
from ledgermq.store.log_reads import LogReads
from ledgermq.store.message_filter import MessageFilter
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.queue_files import SegmentCreatorService
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.reads import StoreReads
from ledgermq.store.recovery import RecoveryResult
from ledgermq.store.reput import ArrivalListener, DispatchService
from ledgermq.store.results import GetResult, PutResult, QueryResult
from ledgermq.store.retention import RetentionRounds
from ledgermq.store.scrub import ScrubSettings
from ledgermq.store.timer.settings import TimerSettings
from ledgermq.util.latency import LatencyHistogram
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)


LogT = TypeVar("LogT", bound=LogReads)
ReputT = TypeVar("ReputT", bound=DispatchService)
CleanerT = TypeVar("CleanerT", bound=RetentionRounds)


class StoreFacade(Generic[LogT, ReputT, CleanerT]):
    """The shared surface of both modes' stores (module docstring), typed by the mode's
    commit log, dispatch service and retention service."""

    reput_type: type[ReputT]
    cleaner_type: type[CleanerT]

    def __init__(self, core: StoreCore, commitlog: LogT) -> None:
        self.core = core
        self.commitlog = commitlog
        self.reads = StoreReads(core, commitlog)

    # == the parts, for callers that look at them ======================================
    @property
    def config(self) -> StoreConfig:
        return self.core.config

    @config.setter
    def config(self, value: StoreConfig) -> None:
        """A live role change: every part of the store reads the new config from here on."""
        self.core.config = value

    @property
    def clock(self) -> Clock:
        return self.core.clock

    @property
    def store_host(self) -> M.Host:
        return self.core.store_host

    @property
    def root(self) -> Path:
        return self.core.root

    @property
    def delay_levels_ms(self) -> list[int]:
        return self.core.delay_levels_ms

    @property
    def timer(self) -> TimerSettings:
        return self.core.timer

    @property
    def lock(self) -> StoreLock:
        return self.core.lock

    @property
    def queues(self) -> ConsumeQueueTable:
        return self.core.queues

    @property
    def index(self) -> IndexService | None:
        return self.core.index

    @property
    def checkpoint(self) -> Checkpoint:
        return self.core.checkpoint

    @property
    def damage(self) -> DamageRegistry:
        return self.core.damage

    @property
    def scrub_settings(self) -> ScrubSettings:
        return self.core.scrub_settings

    @property
    def flush_latency(self) -> LatencyHistogram:
        return self.core.flush_latency

    @property
    def open_file_budget(self) -> int:
        return self.core.open_file_budget

    @property
    def reput(self) -> ReputT | None:
        """The mode's dispatch service, once started."""
        reput = self.core.reput
        assert reput is None or isinstance(reput, self.reput_type)
        return reput

    @property
    def queue_flusher(self) -> ConsumeQueueFlushService | None:
        return self.core.queue_flusher

    @property
    def segment_creator(self) -> SegmentCreatorService:
        return self.core.segment_creator

    @property
    def cleaner(self) -> CleanerT | None:
        """The mode's retention service, once started."""
        cleaner = self.core.cleaner
        assert cleaner is None or isinstance(cleaner, self.cleaner_type)
        return cleaner

    def started_cleaner(self) -> CleanerT:
        """The retention service, for adding what it must keep; StoreError before ``start``
        (a guard added then would be lost when the service is made)."""
        cleaner = self.cleaner
        if cleaner is None:
            raise StoreError("start the store before adding retention guards")
        return cleaner

    @property
    def recovery(self) -> RecoveryResult | None:
        return self.core.recovery

    @property
    def queue_positions_used(self) -> bool:
        return self.core.queue_positions_used

    @property
    def running(self) -> bool:
        return self.core.running

    @running.setter
    def running(self, value: bool) -> None:
        self.core.running = value

    @property
    def failed_reason(self) -> str | None:
        return self.core.failed_reason

    @property
    def memory_budget(self) -> int:
        """Bytes from the commit log's head that count as "in memory" for pulls."""
        return self.reads.memory_budget

    @memory_budget.setter
    def memory_budget(self, value: int) -> None:
        self.reads.memory_budget = value

    # == lifecycle ===================================================================
    def start(self) -> RecoveryResult:
        """Lock, load, recover and start the services; returns what recovery found."""
        core = self.core
        core.lock.acquire()
        try:
            last_exit_ok = core.lock.last_exit_ok
            core.checkpoint = Checkpoint.load(core.root / "checkpoint")
            core.damage.load()
            self._load_log()
            rebuild_from = core.load_derived(last_exit_ok)
            core.recovery = self._recover(last_exit_ok, rebuild_from)
            core.lock.mark_running()
            self._start_services(core.recovery.reput_from)
        except BaseException:
            self.close_files()
            core.lock.release()
            raise
        core.running = True
        log.info("store %s started: %s", core.root, core.recovery)
        return core.recovery

    @abstractmethod
    def _load_log(self) -> None:
        """Map this mode's log files."""

    @abstractmethod
    def _recover(self, last_exit_ok: bool, index_rebuild_from: int | None) -> RecoveryResult:
        """This mode's recovery of its log and of what derives from it."""

    @abstractmethod
    def _start_services(self, reput_from: int) -> None:
        """Start this mode's background services, dispatching from ``reput_from``."""

    @abstractmethod
    def services(self) -> Sequence[ServiceThread | None]:
        """The background services, in the order they stop: reput before the flushers, so
        every record has its units before they are written down."""

    def shutdown(self) -> None:
        """Stop services (dispatching and flushing what is left), then release the store."""
        core = self.core
        if not core.running:
            return
        core.running = False
        clean = core.stop(self.services())
        if clean:  # after the flushers' last pass, so the checkpoint it names is final
            queue_positions.save_queues(core.config, core.queues)
        self.close_files()
        if clean:
            core.lock.mark_clean_exit()
        core.lock.release()

    def close_files(self) -> None:
        """Close the log and the derived files (no flush beyond what closing does)."""
        self.commitlog.close()
        self.core.close_derived()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # == encoding (shared by native puts and DLedger proposals) ========================
    def encode_message(self, msg: MessageInput) -> Encoded | PutResult:
        """The stored record of ``msg`` (store/encoding.py)."""
        core = self.core
        return encoding.encode_message(msg, core.store_host, core.delay_levels_ms, core.timer, core.clock.wall_ms())

    def encode_batch(self, batch: BatchInput) -> Encoded | PutResult:
        """The stored records of a batch (store/encoding.py)."""
        return encoding.encode_batch(batch, self.core.store_host)

    # == reads (store/reads.py) ======================================================
    def get_message(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, message_filter: MessageFilter | None = None
    ) -> GetResult:
        """Messages of one queue from ``offset`` (RocketMQ ``getMessage`` semantics)."""
        return self.reads.get_message(topic, queue_id, offset, max_msgs, message_filter)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.max_offset_in_queue(topic, queue_id)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.min_offset_in_queue(topic, queue_id)

    def commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reads.commitlog_offset_in_queue(topic, queue_id, offset)

    def offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reads.offset_in_queue_by_time(topic, queue_id, timestamp)

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.reads.earliest_message_time(topic, queue_id)

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reads.message_store_timestamp(topic, queue_id, offset)

    def look_message_by_offset(self, phy_offset: int) -> bytes | None:
        return self.reads.look_message_by_offset(phy_offset)

    def look_message_by_id(self, msg_id: str) -> bytes | None:
        return self.reads.look_message_by_id(msg_id)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryResult:
        return self.reads.query_message(topic, key, max_num, begin_ts, end_ts)

    @property
    def max_phy_offset(self) -> int:
        """The end of the readable commit log (in DLedger mode: of the committed entries)."""
        return self.commitlog.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def flushed_phy_offset(self) -> int:
        return self.commitlog.flushed_offset

    # == dispatch ====================================================================
    def set_appender_dispatches(self, enabled: bool) -> None:
        """With ``enabled``, appends do not wake the reput thread: the appender promises to
        call ``dispatch_appended`` after them (a broker does, once per turn of its event loop;
        broker/write_turn). The store keeps no loop or thread of the appender's: an append
        nobody dispatches is still found by the reput thread's poll."""
        self.core.appender_dispatches = enabled
        if self.core.reput is not None:
            self.core.reput.appender_dispatches = enabled

    def dispatch_appended(self) -> Arrivals:
        """Dispatch, on the calling thread, what was appended (see ``DispatchService.dispatch_appended``);
        returns the queues that grew, whose arrival listeners are left to the caller."""
        reput = self.core.reput
        return reput.dispatch_appended() if reput is not None else {}

    def add_dispatch_hook(self, hook: DispatchHook, *, only_with: str | None = None) -> None:
        """Called with every dispatched record (its DispatchRequest, properties text
        included), after its consume-queue unit is written: on the reput thread, or on
        the thread that calls ``dispatch_appended``. ``only_with``: only records whose
        properties text contains that property name (store/dispatch_hooks.py); a replica
        dispatches a window of records at once only while every hook says so."""
        self.core.dispatch_hooks.append(hook if only_with is None else PropertyHook(hook, only_with))

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Called with (topic, queue id, new max offset) from the reput thread's passes
        (never from ``dispatch_appended``, whose caller gets the queues instead)."""
        self.core.listeners.append(listener)

    def trigger_delete_files(self) -> None:
        if self.core.cleaner is not None:
            self.core.cleaner.trigger()

    def wait_dispatched(self, offset: int | None = None, timeout: float = 10.0) -> bool:
        """Wait until the consume queues cover the commit log up to ``offset`` (default: all)
        and every queue file they need exists (tests and tools look at the files)."""
        reput = self.core.reput
        if reput is None:
            return False
        if not reput.wait_for(self.commitlog.max_offset if offset is None else offset, timeout):
            return False
        creator = self.core.queues.creator
        creator.drain()
        return creator.error is None

    @property
    def dispatch_problem(self) -> str | None:
        """Why stored messages cannot be made readable (or durable in their queues) right
        now, or None; writes are refused while it is set."""
        return self.core.dispatch_problem

    @property
    def dispatch_failures(self) -> int:
        return self.core.dispatch_failures

    @property
    def dispatch_behind_bytes(self) -> int:
        reput = self.core.reput
        return self.commitlog.max_offset - (reput.reput_from if reput is not None else 0)

    def runtime_info(self) -> dict[str, str]:
        """A few numbers for GET_BROKER_RUNTIME_INFO and `ledgermq store inspect`."""
        core = self.core
        return {
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogFlushedOffset": str(self.flushed_phy_offset),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes),
            "consumeQueues": str(len(core.queues.all())),
            "consumeQueueOpenFiles": f"{core.queues.open_files.open_count}/{core.open_file_budget}",
            "dispatchError": self.dispatch_problem or "",
            "consumeQueueFilesPending": str(core.queues.creator.backlog),
            "storeFailed": core.failed_reason or "",
            **core.derived_info(),
            **self.damage_summary().info(),
        }

    def damage_summary(self) -> DamageSummary:
        """Damaged ranges refused now, found and repaired (runtime info and metrics)."""
        return self.core.damage.summary()
