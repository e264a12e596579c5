"""The reput service in DLedger mode: committed entries -> consume queues and index.

It walks ``entries_from(reput_from, max_index=committed index)`` and dispatches the inner
message of each entry at ``body_pos`` with the same ``check_record`` and ``dispatch`` as
the native reput; entries with an empty body (a Raft leader's no-op) are skipped.
``reput_from`` is a data position (the end of the last dispatched entry), so
``wait_for(max_offset)`` means "every committed entry is dispatched".
"""

from __future__ import annotations

import logging

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import StoreError
from ledgermq.protocol import sysflag as SF
from ledgermq.store.consumequeue import ConsumeQueueTable
from ledgermq.store.dispatch import DispatchRequest, Verdict, check_record
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.index import IndexService
from ledgermq.store.reput import DispatchService, HoldOff

log = logging.getLogger(__name__)


class DLedgerReputService(DispatchService):
    """Dispatch of committed DLedger entries (module docstring)."""

    name = "dledger-reput"
    commitlog: DLedgerCommitLog

    def __init__(
        self,
        commitlog: DLedgerCommitLog,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        start_offset: int,
        delay_levels_ms: list[int],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(commitlog, queues, index, start_offset, delay_levels_ms, clock)

    def _dispatch_available(self, hold: HoldOff | None) -> int:
        arrivals: dict[tuple[str, int], int] = {}
        count = 0
        self._held = False
        cl = self.commitlog
        ledger = cl.ledger
        if self.reput_from < cl.divided_offset:
            self.reput_from = cl.divided_offset  # the old log was dispatched at the switch
        try:
            for span in ledger.entries_from(self.reput_from, cl.committed_index):
                if span.body_size:
                    body = ledger.read_body_at(span.body_pos, span.body_size)
                    v: DispatchRequest | Verdict | None = None
                    if body is not None:
                        v = check_record(
                            body,
                            0,
                            len(body),
                            span.body_pos,
                            check_crc=False,
                            delay_levels_ms=self.delay_levels_ms,
                            check_text=False,
                        )
                    if not isinstance(v, DispatchRequest):
                        reason = f"entry {span.index} at {span.pos}: {v.reason if v is not None else 'unreadable'}"
                        if self.stuck_reason is None:
                            log.error("reput stopped: %s", reason)
                        self.stuck_reason = reason
                        break
                    if not self.dispatch_one(v):
                        break
                    if SF.gets_queue_entry(v.sysflag):
                        arrivals[(v.topic, v.queue_id)] = v.queue_offset + 1
                    self.dispatched_ts = v.store_timestamp
                    count += 1
                self.reput_from = span.next_pos
        except StoreError as exc:  # unreadable data (a deleted file)
            if self.stuck_reason is None:
                log.error("reput stopped at %d: %s", self.reput_from, exc)
            self.stuck_reason = str(exc)
        self._notify_progress()
        self._notify(arrivals)
        return count
