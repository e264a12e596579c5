"""The Raft driver's side of a store in DLedger mode (enableDLegerCommitLog).

``DLedgerMessageStore`` holds a ``DLedgerWrites`` and forwards these methods to it. Every
position they take is a Raft (DLedger) index. Order and meaning: docs/architecture.md,
"DLedger mode in the message store". All are synchronous; one driver thread calls them at
a time, and a leader writes entries in the order it prepared them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ledgermq.errors import StoreClosedError
from ledgermq.store.commitlog import EncodedMessage, queue_key
from ledgermq.store.core import StoreCore
from ledgermq.store.dledger.commitlog import DLedgerCommitLog, EntryToWrite

DLEDGER_APPEND_FAILED = "DLedger append failed"
RERECOVERY_UNDER_WAY = "this member is re-recovering its DLedger log; ask again shortly"


class DLedgerWrites:
    """Writes by Raft index to a DLedger-mode store's log, and what they change around it."""

    def __init__(self, core: StoreCore, commitlog: DLedgerCommitLog) -> None:
        self.core = core  # its reput is set at start
        self.commitlog = commitlog
        self.queues = core.queues
        self.index = core.index

    def prepare_append(self, messages: list[EncodedMessage], topic: str, queue_id: int) -> list[bytearray]:
        """Leader: assign queue offsets and the store time to encoded messages (one message,
        or a batch of one topic-queue); returns one entry body per message, to propose."""
        return self._dledger_log().prepare_append(messages, topic, queue_id)

    def append_entries(self, entries: Sequence[EntryToWrite], *, placed: bool = False) -> list[int]:
        """Leader and followers: append ``(index, term, body)`` entries to the DLedger log
        (each body's PHYSICALOFFSET becomes its data position + 48); returns entry positions.
        Nothing is readable or dispatched before ``commit_to_index`` covers it. ``placed``: the
        bodies came from this store's ``prepare_append`` (their queue offsets are counted)."""
        try:
            return self._dledger_log().append_entries(entries, placed=placed)
        except OSError as exc:
            self.core.fail(f"{DLEDGER_APPEND_FAILED}: {exc}")
            raise

    def commit_to_index(self, index: int) -> int:
        """Entries up to ``index`` are committed: they become readable and are dispatched."""
        return self._dledger_log().commit_to_index(index)

    def truncate_after_index(self, index: int) -> None:
        """Follower: drop the uncommitted entries after Raft (DLedger) ``index`` and rebuild
        the next queue offsets from what is left. Refused if it would drop a committed entry
        (``index`` below the committed index)."""
        dl = self._dledger_log()
        reput = self.core.reput
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            dl.truncate_after_index(index)
        self.rebuild_queue_offsets()

    def reopen_ledger(self) -> None:
        """Re-recover the DLedger files after a Raft driver failed on a write (see
        ``DLedgerCommitLog.reopen_ledger``), then clear the failure a failed append left and
        rebuild the next queue offsets from what recovery kept. The reput waits meanwhile,
        and pulls are refused (asked to come again, never told their messages are gone)
        until the consume queues end where the re-recovered log does.
        Raises (the store stays failed) if the files cannot be recovered or the checkpoint
        cannot be written; a caller retries later."""
        dl = self._dledger_log()
        reput = self.core.reput
        with (
            reput.holding_long() if reput is not None else contextlib.nullcontext(),
            dl.refusing_reads(RERECOVERY_UNDER_WAY),
        ):
            ledger = dl.reopen_ledger()
            rec = ledger.recovery
            if rec is not None and rec.damage_found:
                # The log was cut below entries already dispatched: their queue units and index
                # entries go, and the reput re-dispatches them from the repaired log.
                end = dl.max_offset
                for cq in self.queues.all():
                    cq.truncate_dirty(end)
                if self.index is not None:
                    self.index.forget_after(end)
                if reput is not None and reput.reput_from > end:
                    reput.reput_from = end
        failed = self.core.failed_reason
        if failed is not None and failed.startswith(DLEDGER_APPEND_FAILED):
            self.core.failed_reason = None
        self.rebuild_queue_offsets()

    def rebuild_queue_offsets(self) -> None:
        """Recompute the next queue offset of every queue from the consume queues and every
        stored entry past them, committed or not (after a truncation, on becoming leader,
        or after a proposal that was never written)."""
        self._dledger_log()
        self.recount_queue_offsets()

    def recount_queue_offsets(self) -> None:
        """``rebuild_queue_offsets``'s work, for a store that is still starting."""
        dl = self.commitlog
        reput = self.core.reput
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            base = {queue_key(cq.topic, cq.queue_id): cq.max_offset for cq in self.queues.all()}
            dl.rebuild_queue_offsets(base, reput.reput_from if reput is not None else dl.max_offset)

    def _dledger_log(self) -> DLedgerCommitLog:
        if not self.core.running:
            raise StoreClosedError("the store is not running")
        return self.commitlog
