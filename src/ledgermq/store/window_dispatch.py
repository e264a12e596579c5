"""Dispatch of records read in bulk: a replica's received window, a backlog, a DLedger
member's committed entries.

The reput's ``_SegmentPass`` stages one ``DispatchRequest`` per record: the facts a put
left behind (store/appended.py) or ``check_record``'s parse. A replica has no such facts
for anything, so its pass read every record with ``check_record`` and then wrote its unit,
index entries and arrival one record at a time: 53-67% of a slave's event-loop CPU went
there (docs/benchmarks.md). Here the same work is done a window at a time: rows read by
``record_scan.scan_records`` (one struct read per record, the three properties found in
the raw bytes), units staged per queue and written with one write per queue per round
(``RowRound``), the round's index entries added under one lock
(``IndexService.build_rows``), arrivals taken per queue from its last unit. A
``DispatchRequest`` is built only for a record a hook wants (a ``PropertyHook`` names
which; any other hook wants all) or for a failure's message.

``ScanPass`` walks a native commit log's segment. It runs where it gives the same results
as ``_SegmentPass``: no facts are queued (the records this process appended go there) and
no damage is registered (stepping over it is the record pass's). Whatever the scan will
not vouch for (a blank, a record still arriving, a bad one) it hands to ``_SegmentPass``
at that very position, which decides as it always did. Rounds, failure and hold-off rules
are the record pass's: a round is at most ``ROUND_RECORDS`` records; a unit, index entry
or queue that cannot be made ends the round before that record, which the next pass tries
again (idempotent for what went through); a replica's hold-off is looked at between scans
of ``HOLD_CHECK_RECORDS``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ledgermq.store.consumequeue import ConsumeQueue, Unit
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.dispatch_hooks import DispatchHook, PropertyHook
from ledgermq.store.index import IndexNotBuilt
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.queue_table import put_staged_units
from ledgermq.store.record_scan import (
    PHYS,
    PROPS,
    QUEUE_ID,
    QUEUE_OFFSET,
    SIZE,
    STORE_TS,
    SYSFLAG,
    TAGS_CODE,
    TOPIC,
    Row,
    request_of,
    scan_records,
)

if TYPE_CHECKING:
    from ledgermq.store.dispatch_host import Arrivals, DispatchHost, HoldOff

log = logging.getLogger(__name__)

HOLD_CHECK_RECORDS = 64  # records scanned between two looks at a replica's ``hold_off``


class RowRound:
    """One dispatch round of rows (at most the caller's round size): their units staged
    per queue, then written, indexed, handed to the hooks that asked and announced, up to
    the first record that could not be dispatched. Shared by ``ScanPass`` (a native log's
    windows) and the DLedger reput (one row per committed entry)."""

    __slots__ = ("arrivals", "by_queue", "count", "no_queue_entry", "rows", "service", "stage_failure", "units")

    def __init__(self, service: DispatchHost, arrivals: Arrivals, no_queue_entry: int) -> None:
        self.service = service
        self.arrivals = arrivals
        self.no_queue_entry = no_queue_entry  # the SYSFLAG bit of records without a unit
        self.count = 0  # records dispatched by the rounds finished so far
        self.rows: list[Row] = []
        self.units: dict[ConsumeQueue, list[Unit]] = {}
        self.by_queue: dict[tuple[str, int], list[Unit]] = {}
        self.stage_failure: tuple[DispatchRequest, Exception] | None = None

    def stage(self, rows: list[Row]) -> int:
        """Add ``rows`` and their units; returns how many were staged: fewer than all when
        a record's queue could not be made (noted for ``finish``, which the caller calls
        next; it goes on at that record next time)."""
        staged = self.rows
        units = self.units
        by_queue = self.by_queue
        no_entry = self.no_queue_entry
        n = len(staged)
        for j, row in enumerate(rows):
            if row[SYSFLAG] & no_entry:
                continue
            key = (row[TOPIC], row[QUEUE_ID])
            cq_units = by_queue.get(key)
            if cq_units is None:
                try:
                    cq = self.service.queues.find_or_create(key[0], key[1])
                except Exception as exc:
                    staged.extend(rows[:j])  # their units are staged; this record's is not
                    self.stage_failure = (request_of(row), exc)
                    return j
                cq_units = units.get(cq)
                if cq_units is None:
                    cq_units = units[cq] = []
                by_queue[key] = cq_units
            cq_units.append((row[PHYS], row[SIZE], row[TAGS_CODE], row[QUEUE_OFFSET], row[STORE_TS], n + j))
        staged.extend(rows)
        return len(rows)

    def finish(self) -> int:
        """Write the round's units (one write per queue), index its rows, call the hooks that
        want them and note the queues that grew, up to the first record that could not be
        dispatched (or the record after them that could not be staged); returns how many
        were. The round is empty again."""
        service = self.service
        failed_next, self.stage_failure = self.stage_failure, None
        rows, units = self.rows, self.units
        done = len(rows)
        failure: tuple[int, Exception] | None = None
        done, why = put_staged_units(service.queues, units, done)
        if why is not None:
            failure = (done, why)
        index = service.index
        if index is not None and done:
            try:
                index.build_rows(rows, done)
            except IndexNotBuilt as exc:
                done = exc.failed
                failure = (done, exc.__cause__ if isinstance(exc.__cause__, Exception) else exc)
        if service.dispatch_hooks and done:
            self._call_hooks(done)
        arrivals = self.arrivals
        for cq, cq_units in units.items():
            for unit in reversed(cq_units):
                if unit[5] < done:
                    arrivals[(cq.topic, cq.queue_id)] = unit[3] + 1
                    break
        if done:
            service.dispatched_ts = rows[done - 1][STORE_TS]
        self.count += done
        if failure is not None:
            service._dispatch_failed(request_of(rows[failure[0]]), failure[1])
        elif failed_next is not None:
            service._dispatch_failed(*failed_next)
        elif service.dispatch_error is not None and done:
            service._dispatch_recovered()
        self.rows, self.units, self.by_queue = [], {}, {}
        return done

    def _call_hooks(self, done: int) -> None:
        """Each hook with the records it wants, in commit-log order: a ``PropertyHook``
        those whose raw properties name its property, any other hook every record."""
        hooks = self.service.dispatch_hooks
        rows = self.rows
        for i in range(done):
            props = rows[i][PROPS]
            req = None
            for hook in hooks:
                if isinstance(hook, PropertyHook):
                    if hook.raw_name not in props:
                        continue
                    call: DispatchHook = hook.hook
                else:
                    call = hook
                if req is None:
                    req = request_of(rows[i])
                try:
                    call(req)
                except Exception:
                    log.exception("dispatch hook failed for %s-%d offset %d", req.topic, req.queue_id, req.queue_offset)


class ScanPass:
    """One pass over one mapped file from the reput's position, window by window."""

    __slots__ = ("hold", "mf", "pos", "round", "service", "start")

    def __init__(
        self, service: DispatchHost, mf: MappedFile, arrivals: Arrivals, hold: HoldOff | None, no_queue_entry: int
    ) -> None:
        self.service = service
        self.mf = mf
        self.hold = hold
        self.start = mf.start_offset
        self.pos = service.reput_from - mf.start_offset  # relative to the file
        self.round = RowRound(service, arrivals, no_queue_entry)

    def run(self, round_records: int) -> tuple[int, bool]:
        """Dispatch what the scan vouches for; move ``reput_from`` past it. Returns how many
        records and whether the record pass must go on from ``reput_from`` (the scan
        stopped at something it leaves to ``check_record``)."""
        mf, service, rnd = self.mf, self.service, self.round
        limit = mf.wrote
        hold = self.hold
        hand_over = False
        want = round_records if hold is None else min(round_records, HOLD_CHECK_RECORDS)
        while self.pos < limit:
            rows, end = scan_records(
                mf.mm,
                self.pos,
                limit,
                self.start,
                mf.size,
                min(want, round_records - len(rnd.rows)),
                service.delay_levels_ms,
            )
            if not rows:
                hand_over = True
                break
            staged = rnd.stage(rows)
            if staged < len(rows):  # a queue could not be made: the round ends before its record
                self.pos = rows[staged][PHYS] - self.start
                self._finish()
                break
            self.pos = end
            if len(rnd.rows) >= round_records and not self._finish():
                break
            if hold is not None and hold() and service.clock.monotonic() >= service._run_until:
                service._held = True
                break
        if rnd.rows:
            self._finish()
        service.reput_from = self.start + self.pos
        return rnd.count, hand_over

    def _finish(self) -> bool:
        """Finish the round; True if all of it was dispatched, else the pass stands at the
        first record that was not."""
        rows = self.round.rows
        done = self.round.finish()
        if done < len(rows):
            self.pos = rows[done][PHYS] - self.start
            return False
        return True
