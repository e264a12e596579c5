"""The reput service in DLedger mode: committed entries -> consume queues and index.

It walks ``entries_from(reput_from, max_index=committed index)`` and reads the inner
message of each entry at ``body_pos`` as one row (store/record_scan.py, the same facts
``check_record`` gives; a message it refuses stops dispatch with ``check_record``'s
reason); entries with an empty body (a Raft leader's no-op) are skipped. Rows are
dispatched in rounds of at most ``ROUND_RECORDS`` (store/window_dispatch.py: one
consume-queue write per queue per round, the index entries under one lock), as the native
reput does: a follower catching up, or a leader whose commit moved by a batch, no longer
writes one unit at a time. ``reput_from`` is a data position (the end of the last
dispatched entry), so ``wait_for(max_offset)`` means "every committed entry is
dispatched"; it moves past a round's entries once they are dispatched, and stands at the
entry of the first record that could not be.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import StoreError
from ledgermq.protocol import sysflag as SF
from ledgermq.store.dispatch import DispatchRequest, Verdict, check_record
from ledgermq.store.dispatch_host import HoldOff
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.ledger_store import DLedgerStore, EntrySpan
from ledgermq.store.index import IndexService
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.record_scan import Row, scan_records
from ledgermq.store.reput import ROUND_RECORDS, DispatchService
from ledgermq.store.window_dispatch import RowRound

_NO_QUEUE_ENTRY = SF.TRANSACTION_PREPARED_TYPE  # the SYSFLAG bit of records without a unit

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
        """Committed entries past ``reput_from``, in rounds of at most ``ROUND_RECORDS``
        messages (store/window_dispatch.py): each entry's message read as a row, a round's
        units written with one write per queue. ``reput_from`` moves past a round's entries
        once they are dispatched, and stops at the first one that could not be."""
        arrivals: dict[tuple[str, int], int] = {}
        self._held = False
        cl = self.commitlog
        ledger = cl.ledger
        if self.reput_from < cl.divided_offset:
            self.reput_from = cl.divided_offset  # the old log was dispatched at the switch
        rnd = RowRound(self, arrivals, _NO_QUEUE_ENTRY)
        starts: list[int] = []  # the entry position of each row of the round
        cursor = self.reput_from  # past every entry walked
        try:
            for span, row in self._walk(cl, ledger):
                if span.body_size:
                    rows = [row] if row is not None else self._row_of(span)
                    if rows is None:
                        break  # stuck there
                    if rnd.stage(rows) == 0:  # its queue could not be made: tried again next pass
                        self._finish(rnd, starts, span.pos)
                        break
                    starts.append(span.pos)
                cursor = span.next_pos
                if not rnd.rows:
                    self.reput_from = cursor  # nothing pending (a no-op entry): passed at once
                elif len(rnd.rows) >= ROUND_RECORDS:
                    if not self._finish(rnd, starts, cursor):
                        break
                    starts = []
        except StoreError as exc:  # unreadable data (a deleted file)
            if self.stuck_reason is None:
                log.error("reput stopped at %d: %s", cursor, exc)
            self.stuck_reason = str(exc)
        if rnd.rows:
            self._finish(rnd, starts, cursor)
        self._notify_progress()
        self._notify(arrivals)
        return rnd.count

    def _walk(self, cl: DLedgerCommitLog, ledger: DLedgerStore) -> Iterator[tuple[EntrySpan, Row | None]]:
        """The committed entries from ``reput_from``: first the run the writer left rows for
        (fresh_rows.py), then the data files from where that run ends."""
        committed = cl.committed_index
        pos = self.reput_from
        while run := cl.take_fresh(pos, committed):
            for fresh in run:
                yield fresh
                pos = fresh[0].next_pos
        for span in ledger.entries_from(pos, committed):
            yield span, None

    def _row_of(self, span: EntrySpan) -> list[Row] | None:
        """The row of the message in ``span``'s body; None (and dispatch stuck) if there is
        none, with ``check_record``'s reason."""
        ledger = self.commitlog.ledger
        body = ledger.read_body_at(span.body_pos, span.body_size)
        if body is not None:
            rows, _end = scan_records(body, 0, len(body), span.body_pos, len(body), 1, self.delay_levels_ms)
            if rows:
                return rows
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
        reason = f"entry {span.index} at {span.pos}: {v.reason if isinstance(v, Verdict) else 'unreadable'}"
        if self.stuck_reason is None:
            log.error("reput stopped: %s", reason)
        self.stuck_reason = reason
        return None

    def _finish(self, rnd: RowRound, starts: list[int], cursor: int) -> bool:
        """Finish the round; move ``reput_from`` to ``cursor`` if all of it was dispatched
        (True), else to the entry of the first record that was not."""
        staged = len(rnd.rows)
        failed = rnd.stage_failure is not None
        done = rnd.finish()
        self.reput_from = starts[done] if done < staged else cursor
        return done == staged and not failed
