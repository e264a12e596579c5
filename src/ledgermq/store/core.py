"""The parts of the message store both modes share, held by each mode's facade.

A native store (``NativeMessageStore``) and a DLedger-mode store (``DLedgerMessageStore``)
keep messages in different logs but derive the same things from them: consume queues, the
index, the checkpoint, the store lock, the damaged-range registry the queues explain gaps
with, dispatch (a reput service per mode), the consume-queue flusher and segment creator,
retention rounds, and the checks a message passes before it is written. ``StoreCore``
holds those and the state both modes report (running, failed); it knows nothing of which
log the messages are in.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterable
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.protocol import message as M
from ledgermq.protocol.names import TOPIC_NAME_PATTERN
from ledgermq.store import queue_positions
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.damage import FILE_NAME as DAMAGE_FILE
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.dispatch_hooks import DispatchHook
from ledgermq.store.flush import ConsumeQueueFlushService
from ledgermq.store.index import IndexService
from ledgermq.store.lockfile import StoreLock
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.open_files import FileLimit, OpenFiles, capacity_for
from ledgermq.store.queue_files import SegmentCreatorService
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.recovery import RecoveryResult
from ledgermq.store.reput import ArrivalListener, DispatchService
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.retention import DiskUsage, RetentionRounds
from ledgermq.store.scrub import ScrubSettings
from ledgermq.store.timer.settings import TimerSettings
from ledgermq.util.latency import LatencyHistogram
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

_GOOD_TOPICS_MAX = 4096


class StoreCore:
    """What both facades hold: the derived files, dispatch, the shared services and state.

    The facade that owns it starts and stops it; the services are set by the facade's
    ``start`` (which reput, which retention), so they are None before it."""

    def __init__(self, config: StoreConfig, *, clock: Clock, store_host: M.Host, disk_usage: DiskUsage) -> None:
        self.config = config
        self.clock = clock
        self.store_host = store_host
        self.root = Path(config.root_dir)
        self.delay_levels_ms = config.delay_levels_ms()
        self.timer = TimerSettings.from_store_config(config)  # timer messages (store/timer/)
        self.lock = StoreLock(self.root)
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
        # Damaged commit-log ranges (store/damage.py); the queues explain dispatch gaps with it.
        self.damage = DamageRegistry(self.root / DAMAGE_FILE)
        self.queues.damage = self.damage
        self.scrub_settings = ScrubSettings(
            config.store_scrub_enable, config.store_scrub_bytes_per_second, config.store_scrub_interval_seconds
        )
        self.flush_latency = LatencyHistogram()  # commit-log fsyncs (the native flush thread's)
        self.disk_usage = disk_usage
        self.reput: DispatchService | None = None
        self.queue_flusher: ConsumeQueueFlushService | None = None
        self.segment_creator = SegmentCreatorService(self.queues.creator)
        self.cleaner: RetentionRounds | None = None
        self.listeners: list[ArrivalListener] = []
        self.dispatch_hooks: list[DispatchHook] = []
        self.appender_dispatches = False  # see ``MessageStore.set_appender_dispatches``
        self._good_topics: set[str] = set()  # names that passed the topic rule (a regex per put otherwise)
        self.running = False
        self.failed_reason: str | None = None
        self.recovery: RecoveryResult | None = None
        self.queue_positions_used = False  # this start took a clean stop's queue positions

    # -- start-up and shutdown -------------------------------------------------------
    def load_derived(self, last_exit_ok: bool) -> int | None:
        """Load the queue table (a clean stop's positions when they still hold) and the
        index; returns where the index must be rebuilt from (None: nowhere)."""
        self.queue_positions_used = queue_positions.load_queues(self.config, self.queues, last_exit_ok)
        return self.index.load(last_exit_ok, self.checkpoint.index_ts) if self.index is not None else None

    def wire_reput(self, reput: DispatchService) -> None:
        """Make ``reput`` the store's dispatcher, with the listeners and hooks added so far."""
        reput.listeners = self.listeners
        reput.appender_dispatches = self.appender_dispatches
        reput.dispatch_hooks = self.dispatch_hooks
        self.reput = reput

    def start_queue_flusher(self, reput: DispatchService) -> ConsumeQueueFlushService:
        self.queue_flusher = ConsumeQueueFlushService(
            self.queues,
            self.index,
            self.checkpoint,
            lambda: reput.dispatched_ts,
            self.config.flush_interval_consume_queue_ms,
        )
        return self.queue_flusher

    def stop(self, services: Iterable[ServiceThread | None]) -> bool:
        """Stop ``services`` in order; True when the stop is clean (nothing failed, nothing
        left undispatched, every service ended), so queue positions may be saved."""
        stopping = [s for s in services if s is not None]
        for svc in stopping:
            svc.stop()
        reput = self.reput
        return (
            self.failed_reason is None
            and self.queues.creator.error is None
            and (reput is None or (reput.stuck_reason is None and reput.dispatch_error is None))
            and not any(svc.alive for svc in stopping)
        )

    def close_derived(self) -> None:
        self.queues.close()
        if self.index is not None:
            self.index.close()

    def fail(self, reason: str) -> None:
        """The store refuses writes until reopened (logged once)."""
        if self.failed_reason is None:
            self.failed_reason = reason
            log.error("store failed, refusing writes until reopened: %s", reason)

    # -- what a message must pass before it is written ---------------------------------
    def refuse_put(self, topic: str, body_size: int, queue_id: int, fence: str | None) -> PutResult | None:
        """Why a message of ``topic`` with a ``body_size``-byte body cannot be written now
        (the store's state, the disk, its size, its topic, its queue), or None. ``fence``:
        why writes are refused by role or recovery (a slave, a fenced master), or None."""
        if not self.running or self.failed_reason is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.failed_reason or "store is not running")
        if self.reput is not None and self.reput.dispatch_error is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.reput.dispatch_error)
        if self.queues.creator.error is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.queues.creator.error)
        if fence is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=fence)
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

    def refuse_message(self, msg: MessageInput, fence: str | None) -> PutResult | None:
        """Why ``msg`` cannot be written now (``refuse_put``, then its properties), or None."""
        return self.refuse_put(msg.topic, len(msg.body), msg.queue_id, fence) or self.refuse_text(msg.properties)

    def refuse_batch(self, batch: BatchInput, fence: str | None) -> PutResult | None:
        """Why ``batch`` cannot be written now (``refuse_put`` of its whole body, then each
        message's properties), or None. A batch encoded from its body holds no NUL in its
        properties (``encoding.encode_batch_body`` leaves those to the entries' path)."""
        encoded = batch.encoded
        body_bytes = encoded.body_bytes if encoded is not None else sum(len(b) for _, b, _ in batch.entries)
        refused = self.refuse_put(batch.topic, body_bytes, batch.queue_id, fence)
        for _flag, _body, props in batch.entries:
            refused = refused or self.refuse_text(props)
        return refused

    @staticmethod
    def refuse_text(props: dict[str, str]) -> PutResult | None:
        """NUL in properties is refused: recovery reads it as the mark of a torn write."""
        for k, v in props.items():
            if "\x00" in k or "\x00" in v:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"property {k!r} contains a NUL character")
        return None

    # -- dispatch state -----------------------------------------------------------------
    @property
    def dispatch_problem(self) -> str | None:
        """Why stored messages cannot be made readable (or durable in their queues) right
        now, or None; writes are refused while it is set."""
        return (self.reput.dispatch_error if self.reput else None) or self.queues.creator.error

    @property
    def dispatch_failures(self) -> int:
        return (self.reput.dispatch_failures if self.reput else 0) + self.queues.creator.failures

    def derived_info(self) -> dict[str, str]:
        """Runtime info about the queues and the index (both modes; damage: the facade's
        ``damage_summary``)."""
        stats = self.queues.stats
        return {
            "storeQueueRebuilds": str(stats.queue_rebuilds),
            "storeQueueUnitsRewritten": str(stats.units_rewritten),
            "storeQueuePlaceholders": str(stats.placeholders),
            "storeQueueUnitsChecked": str(stats.units_checked),
            "storeQueueUnexplainedGaps": str(stats.unexplained_gaps),
            "storeIndexRebuilds": str(self.index.files_dropped if self.index is not None else 0),
        }
