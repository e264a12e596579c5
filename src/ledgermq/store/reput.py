"""The reput service: turns new commit-log bytes into consume-queue units and index entries.

It runs the same way on a master (after puts) and on a slave or follower (after raw
appends): it follows ``reput_from`` through the commit log, dispatches each record, and
then tells arrival listeners (the broker's long-polling pulls) which queues grew. Appenders
call ``wakeup`` so a new message is dispatched at once rather than at the next poll.

A replica may set ``hold_off``: while it returns True (its HA client is receiving a
backlog) the background loop pauses between slices of records. Both share one
interpreter lock, so running them side by side only slows the copy down without making
dispatch finish sooner; the hold lasts at most ``MAX_HOLD_S`` in a row, after which
dispatch runs at least ``MIN_RUN_S`` before it yields again. ``dispatch_available``
and the final pass at shutdown never hold off (``wait_for`` waits for the background
loop, so it may wait up to ``MAX_HOLD_S`` longer while a copy is under way).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol import sysflag as SF
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.consumequeue import ConsumeQueue, Unit
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.dispatch import BLANK, END_OF_DATA, INCOMPLETE, DispatchRequest, Verdict, check_record
from ledgermq.store.dispatch_hooks import DispatchHook
from ledgermq.store.dispatch_host import Arrivals, HoldOff
from ledgermq.store.index import IndexNotBuilt, IndexService
from ledgermq.store.log_reads import LogReads
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.queue_table import ConsumeQueueTable, put_staged_units
from ledgermq.store.record_check import next_sound_record
from ledgermq.store.window_dispatch import ScanPass
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)

ArrivalListener = Callable[[str, int, int], None]  # topic, queue id, new max offset

# An appender dispatches what it just appended itself when no more than this is waiting;
# a bigger backlog (recovery, a slave catching up) is left to the thread.
INLINE_MAX_BYTES = 1024 * 1024
# How long an appender waits for the thread's own pass to let go of the dispatch lock. A pass
# is short (the backlog is small); the bound only matters if a long holder took the lock
# between the appender's look at ``_long_holds`` and its wait.
PASS_WAIT_S = 2.0
MAX_HOLD_S = 0.5
MIN_RUN_S = 0.05
_HOLD_POLL_S = 0.02
_HOLD_CHECK_EVERY = 16  # records between two looks at ``hold_off``
# SYSFLAG bit set for exactly the records that get no consume-queue unit (PREPARED and
# ROLLBACK; ``sysflag.gets_queue_entry``), tested inline on the per-record path.
_NO_QUEUE_ENTRY = SF.TRANSACTION_PREPARED_TYPE
assert all(SF.gets_queue_entry(t) == (not t & _NO_QUEUE_ENTRY) for t in range(0, 16, 4))
# Records whose consume-queue units are written together (one write per queue); bounds
# what a pass holds while it catches up a backlog.
ROUND_RECORDS = 512


def dispatch(req: DispatchRequest, queues: ConsumeQueueTable, index: IndexService | None) -> None:
    """Write one record's consume-queue unit and index entries (idempotent)."""
    if SF.gets_queue_entry(req.sysflag):
        cq = queues.find_or_create(req.topic, req.queue_id)
        cq.put(req.commit_log_offset, req.size, req.tags_code, req.queue_offset, req.store_timestamp)
        queues.mark_dirty(cq)
    if index is not None:
        index.build(req)


def redispatch(req: DispatchRequest, queues: ConsumeQueueTable, index: IndexService | None) -> bool:
    """Dispatch a record whose unit may exist already, rewriting it where it disagrees (a
    placeholder for a record lost in a damaged range, a torn or rotten unit): recovery's
    replay after a crash and ``repair_range``. A record whose unit had to be written or
    rewritten was never properly dispatched, so it is indexed even below the index's
    replay guard. True if its unit changed."""
    changed = False
    if SF.gets_queue_entry(req.sysflag):
        cq = queues.find_or_create(req.topic, req.queue_id)
        changed = cq.rewrite(req.commit_log_offset, req.size, req.tags_code, req.queue_offset, req.store_timestamp)
        if changed:
            queues.mark_dirty(cq)
    if index is not None:
        index.build(req, force=changed)
    return changed


class DispatchService(ServiceThread):
    """What dispatch is in either mode: the thread (woken by appenders, polling every
    50 ms, holding off for a replica's copy), dispatch of a record with its failure and
    recovery, dispatch hooks, arrival listeners and ``wait_for``. A subclass walks its own
    log in ``_dispatch_available`` (the native commit log's segments here, DLedger entries
    in store/dledger/reput.py)."""

    name = "reput"

    commitlog: LogReads

    def __init__(
        self,
        commitlog: LogReads,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        start_offset: int,
        delay_levels_ms: list[int],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(0.05)
        self.clock = clock
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.reput_from = start_offset
        self.delay_levels_ms = delay_levels_ms
        self.dispatched_ts = 0
        self.listeners: list[ArrivalListener] = []
        # Called with each dispatched record, in the reput thread (the broker's SQL92
        # match cache); a failing hook is logged and never stops dispatch.
        self.dispatch_hooks: list[DispatchHook] = []
        self.stuck_reason: str | None = None
        # Set while a record cannot be dispatched (a full disk, no descriptor, a directory
        # that cannot be made): the store refuses puts, since it could not make them
        # readable, and the record is tried again every pass until it goes through.
        self.dispatch_error: str | None = None
        self.dispatch_failures = 0
        self.hold_off: HoldOff | None = None
        # Registered damaged ranges are stepped over, not parsed (set by the store).
        self.damage: DamageRegistry | None = None
        # The appender calls ``dispatch_appended`` after its appends: they do not wake the thread.
        self.appender_dispatches = False
        self._collecting: Arrivals | None = None  # ``dispatch_appended``'s arrivals, under ``lock``
        self._run_until = 0.0  # no holding off before this (monotonic seconds)
        self._held = False  # the last pass stopped early because of ``hold_off``
        self._progress = threading.Condition()
        self._waiting = 0  # callers in ``wait_for``, counted under ``_progress``
        # Held while dispatching; online truncation takes it so no unit for cut data is written.
        self.lock = threading.Lock()
        # Holders that may keep ``lock`` long (repair, re-derivation, truncation; ``holding_long``),
        # counted before they take it and after they let go, under ``_long_holds_lock``.
        self._long_holds = 0
        self._long_holds_lock = threading.Lock()

    def step(self) -> None:
        hold = self.hold_off
        while True:
            if hold is not None:
                self._wait_while_held(hold)
            with self.lock:
                self._dispatch_available(hold)
            if not self._held:
                return

    def _wait_while_held(self, hold: HoldOff) -> None:
        now = self.clock.monotonic()
        if now < self._run_until:
            return
        deadline = now + MAX_HOLD_S
        while hold() and not self.stopping:
            if self.clock.monotonic() >= deadline:
                self._run_until = self.clock.monotonic() + MIN_RUN_S
                return
            time.sleep(_HOLD_POLL_S)

    def on_stop(self) -> None:
        self.dispatch_available()  # a clean shutdown leaves nothing undispatched

    def after_append(self) -> None:
        """Called by the appender after each append: wakes the thread, unless the appender
        said it dispatches what it appends itself (``appender_dispatches``, set by a broker
        whose end-of-turn step calls ``dispatch_appended``; broker/write_turn).

        Why an appender dispatches: a wake-up of the reput thread, and the interpreter-lock
        hand-offs it brings, cost more than dispatching a record (measured: about 80 us of
        CPU per single send on a master, 70 on its slave), and one pass per loop turn keeps
        a burst of appends batched as the thread batched it. An append the appender leaves
        undispatched is still found by the thread's poll (every 50 ms)."""
        if not self.appender_dispatches:
            self.wakeup()

    def dispatch_appended(self) -> Arrivals:
        """Dispatch what was appended, on the calling thread, when that is cheap, and return
        the queues that grew (their listeners are *not* called: the caller announces them);
        else wake the thread and return nothing. The thread keeps a backlog over
        ``INLINE_MAX_BYTES``, a replica holding off, and what arrives while repair or
        truncation holds ``lock`` (it picks the records up, as the wake-up makes it look
        once more).

        A pass of the thread's own (its 50 ms poll) is waited for: it is short (the backlog
        is small, nothing holds off), and returning with the records undispatched would let
        the broker read the client's next request, a pull after its SEND_OK, before the
        message is readable (tests/broker/test_send_visibility.py failed so beside another
        ``make test``). The lock is then this thread's, and what the pass left is
        dispatched here as usual. Only a holder that announced a long hold
        (``holding_long``) is not waited for."""
        hold = self.hold_off
        if (
            self.stopping  # stopped: nothing more is dispatched, by the thread or here
            or self.commitlog.max_offset - self.reput_from > INLINE_MAX_BYTES
            or (hold is not None and hold())
            or not self._take_lock()
        ):
            self.wakeup()
            return {}
        arrivals: Arrivals = {}
        self._collecting = arrivals
        try:
            self._dispatch_available(None)
        except Exception:
            log.exception("reput: dispatch on the appending thread failed; the reput thread tries again")
            self.wakeup()
        finally:
            self._collecting = None
            self.lock.release()
        return arrivals

    def _take_lock(self) -> bool:
        """``lock`` for the appender: at once if free; after the thread's pass if that holds it;
        not at all behind a long holder. Long holders say so before they take the lock (a flag
        the pass set under it left two windows, just after it took the lock and just before
        it let go, in which an appender gave up and answered before dispatching)."""
        if self.lock.acquire(blocking=False):
            return True
        if self._long_holds:
            return False  # the thread picks the records up after the long hold
        return self.lock.acquire(timeout=PASS_WAIT_S)

    @contextlib.contextmanager
    def holding_long(self) -> Iterator[None]:
        """``lock`` for work that may hold it long (repair, re-deriving queues, truncation):
        an appender that finds it taken leaves its records to the thread instead of stalling
        its loop until the work ends."""
        with self._long_holds_lock:
            self._long_holds += 1
        try:
            with self.lock:
                yield
        finally:
            with self._long_holds_lock:
                self._long_holds -= 1

    def dispatch_available(self) -> int:
        """Dispatch everything appended so far; return how many records were dispatched."""
        with self.lock:
            return self._dispatch_available(None)

    @abstractmethod
    def _dispatch_available(self, hold: HoldOff | None) -> int:
        """Dispatch what the log holds past ``reput_from`` (under ``lock``); how many records."""

    def _notify_progress(self) -> None:
        """Wake ``wait_for`` callers; skips the condition's lock when nobody waits (every
        pass of every put would pay for it). A waiter registers under the lock before it
        reads ``reput_from``, so one that registers after this look sees the new value."""
        if self._waiting:
            with self._progress:
                self._progress.notify_all()

    def dispatch_one(self, req: DispatchRequest) -> bool:
        """Dispatch one record; on failure record why (sticky until it succeeds)."""
        try:
            dispatch(req, self.queues, self.index)
        except Exception as exc:
            self._dispatch_failed(req, exc)
            return False
        if self.dispatch_error is not None:
            self._dispatch_recovered()
        self._after_dispatch(req)
        return True

    def _dispatch_failed(self, req: DispatchRequest, exc: Exception) -> None:
        self.dispatch_failures += 1
        reason = f"cannot make {req.topic}-{req.queue_id} offset {req.queue_offset} readable: {exc}"
        if self.dispatch_error is None:
            log.error("dispatch failing, refusing writes until it recovers: %s", reason, exc_info=exc)
        self.dispatch_error = reason

    def _dispatch_recovered(self) -> None:
        log.warning("dispatch recovered after %d failed attempts: %s", self.dispatch_failures, self.dispatch_error)
        self.dispatch_error = None

    def _after_dispatch(self, req: DispatchRequest) -> None:
        for hook in self.dispatch_hooks:
            try:
                hook(req)
            except Exception:
                log.exception("dispatch hook failed for %s-%d offset %d", req.topic, req.queue_id, req.queue_offset)

    def _notify(self, arrivals: dict[tuple[str, int], int]) -> None:
        collecting = self._collecting
        if collecting is not None:  # ``dispatch_appended``: its caller announces them
            collecting.update(arrivals)
            return
        for (topic, queue_id), max_offset in arrivals.items():
            for listener in self.listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener failed for %s-%d", topic, queue_id)

    def wait_for(self, offset: int, timeout: float) -> bool:
        """Block until everything below ``offset`` is dispatched (tests, HA promotion)."""
        self.wakeup()
        with self._progress:
            self._waiting += 1
            try:
                return self._progress.wait_for(lambda: self.reput_from >= offset, timeout)
            finally:
                self._waiting -= 1


class ReputService(DispatchService):
    """Dispatch of the native commit log: segment by segment, record by record, with the
    facts of what this process appended instead of re-parsing them (store/appended.py)."""

    commitlog: CommitLog

    def __init__(
        self,
        commitlog: CommitLog,
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
        while self.reput_from < self.commitlog.max_offset:
            mf = self.commitlog.queue.find(self.reput_from)
            if mf is None:
                low = self.commitlog.min_offset
                if low <= self.reput_from:
                    break
                log.warning("reput: %d was deleted; skipping to %d", self.reput_from, low)
                self.reput_from = low
                continue
            if not mf.pin():
                low = self.commitlog.min_offset  # a segment being deleted: go past it
                if low > self.reput_from:
                    log.warning("reput: %d is being deleted; skipping to %d", self.reput_from, low)
                    self.reput_from = low
                    continue
                break
            before = self.reput_from
            failures = self.dispatch_failures
            try:
                count += self._dispatch_segment(mf, arrivals, hold)
            finally:
                mf.unpin()
            if self.stuck_reason is not None or self._held or self.reput_from == before:
                break  # stuck, held off, or the tail record is still arriving (a slave)
            if self.dispatch_failures != failures:
                break  # a record could not be dispatched: the next pass tries it again
        self._notify_progress()
        self._notify(arrivals)
        return count

    def _dispatch_segment(self, mf: MappedFile, arrivals: dict[tuple[str, int], int], hold: HoldOff | None) -> int:
        """Dispatch the records of ``mf`` from ``reput_from`` on: a window at a time when no
        record has facts queued (a replica, a backlog; store/window_dispatch.py), else, and
        from wherever the window scan stops, record by record (``_SegmentPass``)."""
        count = 0
        # facts queued (a master's own puts): record by record, without a call to ask why not
        if not self.commitlog.appended.queued and self._window_dispatch_fits():
            count, go_on = ScanPass(self, mf, arrivals, hold, _NO_QUEUE_ENTRY).run(ROUND_RECORDS)
            if not go_on:
                return count
        return count + _SegmentPass(self, mf, arrivals, hold).run()

    def _window_dispatch_fits(self) -> bool:
        """Whether ``ScanPass`` gives what ``_SegmentPass`` would here, given that no facts
        are queued (the caller looked): no registered damage to step over."""
        damage = self.damage
        return damage is None or not damage.any

    def _finish_round(
        self,
        staged: list[DispatchRequest],
        units: dict[ConsumeQueue, list[Unit]],
        arrivals: dict[tuple[str, int], int],
        failed_next: tuple[DispatchRequest, Exception] | None,
    ) -> int:
        """Write the units of ``staged`` records, then index, hook and announce the records
        in order up to the first whose unit or index entries could not be written (or
        ``failed_next``, the record after them, which could not be staged). Returns how
        many records are dispatched; the rest are tried again from the first of them,
        which is idempotent for what already went through."""
        done = len(staged)
        failure = failed_next
        done, why = put_staged_units(self.queues, units, done)
        if why is not None:
            failure = (staged[done], why)
        index = self.index
        if index is not None and done:
            try:
                index.build_staged(staged, done)
            except IndexNotBuilt as exc:
                done = exc.failed
                failure = (staged[done], exc.__cause__ if isinstance(exc.__cause__, Exception) else exc)
        hooks = self.dispatch_hooks
        for i in range(done):
            req = staged[i]
            if hooks:
                self._after_dispatch(req)
            if not req.sysflag & _NO_QUEUE_ENTRY:
                arrivals[(req.topic, req.queue_id)] = req.queue_offset + 1
        if done:
            self.dispatched_ts = staged[done - 1].store_timestamp
        if failure is not None:
            self._dispatch_failed(*failure)
        elif self.dispatch_error is not None and done:
            self._dispatch_recovered()
        return done


class _SegmentPass:
    """One pass over one mapped file from ``reput_from`` on, in rounds of at most
    ``ROUND_RECORDS``: a round's consume-queue units are written per queue with one write
    (``ConsumeQueue.put_units``), then its records are indexed and announced in order. A
    record this process appended comes with its facts (store/appended.py); any other is
    parsed from the bytes.

    A class so that each thing the loop can meet (a damaged range, a sound record, a
    full round, a replica holding off, a blank, a record still arriving, a bad record)
    is a named decision over one shared position and round."""

    __slots__ = (
        "arrivals",
        "count",
        "hold",
        "mf",
        "pos",
        "service",
        "skipped_to",
        "stage_failure",
        "staged",
        "start",
        "units",
    )

    def __init__(
        self, service: ReputService, mf: MappedFile, arrivals: dict[tuple[str, int], int], hold: HoldOff | None
    ) -> None:
        self.service = service
        self.mf = mf
        self.arrivals = arrivals
        self.hold = hold
        self.start = mf.start_offset
        self.pos = service.reput_from - mf.start_offset  # relative to the file
        self.count = 0  # records dispatched (rounds finished)
        self.staged: list[DispatchRequest] = []
        self.units: dict[ConsumeQueue, list[Unit]] = {}
        # The record after ``staged`` whose queue could not be made: the round ends with it.
        self.stage_failure: tuple[DispatchRequest, Exception] | None = None
        self.skipped_to = -1  # where the last damaged range ended (its end may not frame a record)

    def run(self) -> int:
        """Dispatch what is there; move ``reput_from`` past it; return how many records."""
        mf, start = self.mf, self.start
        limit = mf.wrote
        damage = self.service.damage
        appended = self.service.commitlog.appended
        queued = appended.queued
        hold = self.hold
        while self.pos < limit:
            if damage is not None and damage.any and self._step_over_damage(damage):
                continue
            v: DispatchRequest | Verdict | None = appended.take(start + self.pos, limit - self.pos) if queued else None
            if v is None:
                v = self._parse(limit)
            if isinstance(v, DispatchRequest):
                if (
                    not self._stage(v)
                    or (len(self.staged) >= ROUND_RECORDS and self._round_cut_short())
                    or (hold is not None and self._held_off())
                ):  # the two pre-checks: per record, and false for nearly every one
                    break
            elif v.reason == BLANK:
                self.pos = mf.size
                break
            elif v.reason in (END_OF_DATA, INCOMPLETE):
                break  # the rest has not arrived yet (a slave mid-transfer)
            elif not self._resync_after_damage(v, damage):
                self._stop_stuck(v)
                break
        self._finish_last_round()
        self.service.reput_from = start + self.pos
        return self.count

    def _step_over_damage(self, damage: DamageRegistry) -> bool:
        """Skip a registered damaged range at the position; its records' units are kept,
        or placeholders (store/queue_gaps.py). True if it skipped."""
        start = self.start
        hit = damage.overlapping(start + self.pos, start + self.pos + 1)
        if hit is None:
            return False
        log.warning("reput: stepping over damaged commit-log bytes [%d, %d)", hit[0], hit[1])
        self.pos = min(hit[1], self.service.commitlog.max_offset) - start
        self.skipped_to = start + self.pos
        return True

    def _parse(self, limit: int) -> DispatchRequest | Verdict:
        mf = self.mf
        return check_record(
            mf.mm,
            self.pos,
            limit,
            self.start + self.pos,
            check_crc=False,
            delay_levels_ms=self.service.delay_levels_ms,
            capacity=mf.size,
            check_text=False,  # complete records from a master may carry NULs; only recovery cares
        )

    def _stage(self, v: DispatchRequest) -> bool:
        """Add a sound record (and its unit) to the round; False if its consume queue
        cannot be made (the round ends before it, and the failure is recorded then)."""
        if not v.sysflag & _NO_QUEUE_ENTRY:
            try:
                cq = self.service.queues.find_or_create(v.topic, v.queue_id)
            except Exception as exc:
                self.stage_failure = (v, exc)
                return False
            cq_units = self.units.get(cq)
            if cq_units is None:
                cq_units = self.units[cq] = []
            cq_units.append(
                (v.commit_log_offset, v.size, v.tags_code, v.queue_offset, v.store_timestamp, len(self.staged))
            )
        self.staged.append(v)
        self.pos += v.size
        return True

    def _round_cut_short(self) -> bool:
        """Finish the round once it is full; True if a record in it could not be
        dispatched: the pass stops there and the next one tries it again."""
        staged = self.staged
        if len(staged) < ROUND_RECORDS:
            return False
        done = self.service._finish_round(staged, self.units, self.arrivals, None)
        self.count += done
        if done < len(staged):
            self.pos = staged[done].commit_log_offset - self.start
            self.staged = []
            return True
        self.staged, self.units = [], {}
        return False

    def _held_off(self) -> bool:
        """A replica asks dispatch to pause (checked every ``_HOLD_CHECK_EVERY`` records,
        and not before its ``MIN_RUN_S`` of running is over)."""
        hold, service = self.hold, self.service
        if (
            hold is not None
            and (self.count + len(self.staged)) % _HOLD_CHECK_EVERY == 0
            and hold()
            and service.clock.monotonic() >= service._run_until
        ):
            service._held = True
            return True
        return False

    def _resync_after_damage(self, v: Verdict, damage: DamageRegistry | None) -> bool:
        """A bad record right where a damaged range ended is the tail of a record the range
        cut: register it as damage too and go on at the next sound record. True if so."""
        start = self.start
        if self.skipped_to != start + self.pos:
            return False
        nxt = next_sound_record(self.mf.mm, self.pos + 1, self.mf.size, start)
        if damage is None or nxt is None:
            return False
        damage.report(start + self.pos, start + nxt, f"reput: {v.reason}")
        self.pos = nxt
        return True

    def _stop_stuck(self, v: Verdict) -> None:
        """A bad record nothing explains: dispatch stops there (logged once) until fixed."""
        service = self.service
        if service.stuck_reason is None:
            log.error("reput stopped at %d: %s", self.start + self.pos, v.reason)
        service.stuck_reason = v.reason

    def _finish_last_round(self) -> None:
        if self.staged or self.stage_failure is not None:
            done = self.service._finish_round(self.staged, self.units, self.arrivals, self.stage_failure)
            self.count += done
            if done < len(self.staged):
                self.pos = self.staged[done].commit_log_offset - self.start
