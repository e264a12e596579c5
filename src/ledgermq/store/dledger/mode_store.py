"""The message store in DLedger mode (enableDLegerCommitLog): the commit log is the Raft log.

``DLedgerMessageStore`` has no put: a broker in DLedger mode proposes messages to its Raft
group (``check_for_proposal``, ``encode_message``/``encode_batch``, ``prepare_append``),
and the Raft driver writes entries by index (``append_entries``, ``commit_to_index``,
``truncate_after_index``, ``reopen_ledger``; store/dledger/writes.py, a collaborator it
holds). Reads, dispatch and the derived files are the shared ones (store/facade.py), over
``DLedgerCommitLog``'s committed entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import StoreConfig
from ledgermq.errors import StoreError
from ledgermq.protocol import message as M
from ledgermq.store.commitlog import EncodedMessage
from ledgermq.store.core import StoreCore
from ledgermq.store.damage import DamageSummary
from ledgermq.store.dledger.commitlog import DLedgerCommitLog, EntryToWrite
from ledgermq.store.dledger.config import dledger_store_config
from ledgermq.store.dledger.reput import DLedgerReputService
from ledgermq.store.dledger.retention import DLedgerCleanService, LedgerGuard
from ledgermq.store.dledger.store_recovery import recover_dledger
from ledgermq.store.dledger.writes import DLedgerWrites
from ledgermq.store.facade import StoreFacade
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.recovery import RecoveryResult
from ledgermq.store.results import PutResult
from ledgermq.store.retention import DiskUsage, disk_usage_ratio
from ledgermq.util.service import ServiceThread


class DLedgerMessageStore(StoreFacade[DLedgerCommitLog, DLedgerReputService, DLedgerCleanService]):
    """A store whose commit log is the DLedger log (module docstring). Refuses a config not
    in DLedger mode: that store is ``NativeMessageStore``."""

    reput_type = DLedgerReputService
    cleaner_type = DLedgerCleanService

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        store_host: M.Host = ("127.0.0.1", 10911),
        disk_usage: DiskUsage = disk_usage_ratio,
    ) -> None:
        if not config.enable_dleger_commit_log:
            raise StoreError("enableDLegerCommitLog=false: the store is a NativeMessageStore, not a DLedger one")
        core = StoreCore(config, clock=clock, store_host=store_host, disk_usage=disk_usage)
        dledger = DLedgerCommitLog(
            config.commitlog_path, config.mapped_file_size_commitlog, clock, dledger_store_config(config)
        )
        super().__init__(core, dledger)
        self.writes = DLedgerWrites(core, dledger)

    # == lifecycle (StoreFacade.start) =================================================
    def _load_log(self) -> None:
        self.commitlog.load()

    def _recover(self, last_exit_ok: bool, index_rebuild_from: int | None) -> RecoveryResult:
        core = self.core
        return recover_dledger(
            self.commitlog,
            core.queues,
            core.index,
            core.checkpoint,
            abnormal=not last_exit_ok,
            check_crc=core.config.check_crc_on_recover,
            delay_levels_ms=core.delay_levels_ms,
            index_rebuild_from=index_rebuild_from,
        )

    def _start_services(self, reput_from: int) -> None:
        """The reput follows committed entries; no commit-log flusher (the Raft driver
        flushes the DLedger files); retention deletes DLedger data files
        (store/dledger/retention.py)."""
        core = self.core
        reput = DLedgerReputService(
            self.commitlog, core.queues, core.index, reput_from, core.delay_levels_ms, core.clock
        )
        core.wire_reput(reput)
        self.commitlog.on_commit = reput.after_append
        reput.dispatch_available()
        self.writes.recount_queue_offsets()
        core.start_queue_flusher(reput)
        core.cleaner = DLedgerCleanService(
            core.config,
            self.commitlog,
            core.queues,
            core.index,
            core.clock,
            core.disk_usage,
            lambda: reput.reput_from,
        )
        for svc in (reput, core.segment_creator, core.queue_flusher, core.cleaner):
            assert svc is not None
            svc.start()

    def services(self) -> Sequence[ServiceThread | None]:
        core = self.core
        return (core.cleaner, core.reput, core.segment_creator, core.queue_flusher)

    def damage_summary(self) -> DamageSummary:
        """The old native log's damage (below the divided offset) and the DLedger log's."""
        return self.core.damage.summary() + self.commitlog.damage_summary()

    # == proposals (a leader, before the Raft group decides) ============================
    def check_for_proposal(self, msg: MessageInput | BatchInput) -> PutResult | None:
        """What the store refuses about ``msg`` itself (size, topic, queue, properties) or its
        own state, before a leader proposes it; the leader's role, not the store, decides
        whether it may write."""
        if isinstance(msg, MessageInput):
            return self.core.refuse_message(msg, None)
        return self.core.refuse_batch(msg, None)

    def prepare_append(self, messages: list[EncodedMessage], topic: str, queue_id: int) -> list[bytearray]:
        """Leader: assign queue offsets and the store time to encoded messages; one entry
        body per message, to propose."""
        return self.writes.prepare_append(messages, topic, queue_id)

    # == entries by Raft index (store/dledger/writes.py) ===============================
    def append_entries(self, entries: Sequence[EntryToWrite], *, placed: bool = False) -> list[int]:
        """Append ``(index, term, body)`` entries; returns their data positions."""
        return self.writes.append_entries(entries, placed=placed)

    def commit_to_index(self, index: int) -> int:
        """Entries up to Raft ``index`` are committed: readable and dispatched."""
        return self.writes.commit_to_index(index)

    def truncate_after_index(self, index: int) -> None:
        """Follower: drop the uncommitted entries after Raft ``index`` (never a committed one)."""
        self.writes.truncate_after_index(index)

    def reopen_ledger(self) -> None:
        """Re-recover the DLedger files after a Raft driver failed on a write."""
        self.writes.reopen_ledger()

    def rebuild_queue_offsets(self) -> None:
        """Recompute every queue's next offset from the queues and every stored entry."""
        self.writes.rebuild_queue_offsets()

    # == retention by Raft index ======================================================
    def add_ledger_guard(self, guard: LedgerGuard) -> None:
        """Keep the entry at DLedger index ``guard()`` and everything after it (None:
        nothing), unless the disk is past the forcible ratio."""
        self.started_cleaner().add_guard(guard)

    def ledger_guards(self) -> list[LedgerGuard]:
        """The ledger guards registered so far."""
        cleaner = self.cleaner
        return list(cleaner.ledger_guards) if cleaner is not None else []
