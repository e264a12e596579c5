"""The timer store: files rmq_sys_wheel_timer's queue into the wheel and hands out due units.

Synchronous and thread-safe (one lock; each call holds it briefly, a flush's fsyncs run
outside it): the broker's timer service calls it from a worker thread. Two kinds of
broker use it:

* the **delivering** one (master, DLedger leader) files every unit of the queue and
  delivers: ``due_units`` hands out the units of the slot ``read_ms`` in filing order
  once that slot has passed (``now >= read_ms + precision``), or a little before so that
  they are read ahead (written only once it has passed), ``delivered`` records each one
  written to its topic, and the slot is left behind once all of it is;
* a **follower** (slave, DLedger follower) files only up to its master's filed offset
  (``adopt``, from GET_TIMER_CHECK_POINT) and delivers nothing; it takes its master's
  ``read_ms``, so that if it takes over it starts where the master was.

A unit whose slot has passed when it is filed (a timer sent with a delay shorter than the
filing lag, a follower catching up) goes into slot ``read_ms``, which is still to be
delivered (or is being delivered: new units of the slot being walked are picked up
before it is left). Since a follower files a unit after its master did, with a
``read_ms`` at least the master's at that moment, a unit's slot on a follower is never
earlier than on its master: slots the master has left behind hold nothing it did not
deliver, so a follower that takes over loses nothing. What it repeats is bounded by the
sync interval (docs/timers.md, "Failover and duplicates").

A timer more than ``timerRollWindowSlot`` steps after ``read_ms`` is filed at the end of
the window (or half of it) with the roll magic; delivered there, it goes back into the
queue (TIMER_ROLL_TIMES + 1) and is filed again, closer to its time (RocketMQ's roll).

Recovery: the log's tail after the checkpointed flush position is read again and any unit
the wheel does not list yet is added (a crash between the two writes); if the wheel names
positions past the log's end (a power loss flushed the wheel but not the log), the live
slots are rebuilt from the whole log. Filing resumes after the last unit's queue offset,
but not past the checkpoint's master offset (RocketMQ's rule: a demoted master must not
keep what its new master may file differently); units filed twice that way are
delivered twice, a window of at most ``timerFlushIntervalMs`` of filing.
"""

from __future__ import annotations

import logging
import struct
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.store.consumequeue import UNIT as CQ_UNIT
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.timer.checkpoint import CheckpointData, TimerCheckpointFile
from ledgermq.store.timer.delivered_from import DeliveredFrom, find_in
from ledgermq.store.timer.log import MAGIC_DEFAULT, MAGIC_ROLL, UNIT, UNIT_SIZE, TimerLog, Unit
from ledgermq.store.timer.segments import SegmentBook
from ledgermq.store.timer.settings import TIMER_BLANK_SLOTS, TimerSettings
from ledgermq.store.timer.wheel import TimerWheel
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)

_PREV = struct.Struct(">q")
_CQ_BATCH = 512


@dataclass(frozen=True, slots=True)
class DueUnit:
    """A unit to deliver: where its message is, and whether it only rolls back into the wheel."""

    pos: int
    phy: int
    size: int
    roll: bool
    slot_ms: int
    queue_offset: int
    enqueue_ms: int
    due_ms: int  # the end of its slot: not to be written before


@dataclass(frozen=True, slots=True)
class TimerProgress:
    """Figures for metrics and brokerStatus."""

    read_ms: int
    queue_offset: int
    queue_max: int
    pending: int
    filed: int
    delivered: int
    log_end: int


class TimerStore:
    def __init__(
        self,
        root: Path,
        settings: TimerSettings,
        queue: Callable[[], ConsumeQueue | None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.root = root
        self.settings = settings
        self.queue = queue
        self.clock = clock
        self.log = TimerLog(root / "timerlog", settings.log_file_size)
        self.checkpoint = TimerCheckpointFile(root / "config" / "timercheck")
        self.wheel: TimerWheel | None = None
        self.delivering = False
        self.read_ms = 0
        self.done_pos = -1  # the last unit of slot read_ms delivered (-1: none yet)
        self.done_qoff = -1  # units of slot read_ms up to this queue offset were delivered by the old master
        self.queue_offset = 0  # rmq_sys_wheel_timer units filed: [0, queue_offset)
        self.master_queue_offset = 0  # a follower files no further than this
        self.pending = 0
        self.filed = 0
        self.delivered_count = 0
        self.unreadable = 0  # units of a damaged timer log that could not be read (lost)
        self.known_delivered = 0  # units not delivered again: the old master's deliveries said it had
        self._heard: DeliveredFrom | None = None  # the latest delivery heard from the master's records
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # taken before _lock; held across a flush's fsyncs
        self._walk = array("q")  # positions of slot read_ms after done_pos, in filing order
        self._walk_next = 0  # index in _walk of the first not delivered
        self._walk_top = -1  # the highest position collected for the slot
        self._walk_slot = -1
        self.segments = SegmentBook(settings.log_file_size)

    # == lifecycle ===================================================================
    def open(self) -> None:
        """Load and recover (after the message store's recovery: it reads the queue)."""
        p = self.settings.precision_ms
        data = self.checkpoint.load()
        self.log.load()
        seen = self.log.recover(data.log_flush_pos)
        last_segment = self.log.files.last()
        if last_segment is not None:
            self.segments.learn(last_segment, last_segment.wrote)
        self.wheel = TimerWheel(self.root / "timerwheel", self.settings.slots_total, p)
        now = self.settings.slot_of(self.clock.wall_ms())
        cq = self.queue()
        self.read_ms = self.settings.slot_of(data.read_ms)
        self.done_pos = data.done_pos if data.done_pos < self.log.end else -1
        oldest = now - (self.settings.slots_total - TIMER_BLANK_SLOTS) * p
        if not self.checkpoint.existed and self.log.end == 0:
            self.read_ms, self.done_pos = now, -1  # nothing was ever filed: start at the present (late ones go there)
        elif self.read_ms < oldest:
            self.read_ms, self.done_pos = oldest, -1  # RocketMQ's limit: the wheel spans 7 days
        for unit in seen:
            self._refile(unit)
        if self.log.end > 0:
            self._check_wheel()
        last = seen[-1] if seen else self.log.read(self.log.end - UNIT_SIZE) if self.log.end else None
        filed_to = last.queue_offset + 1 if last is not None else data.queue_offset
        self.master_queue_offset = data.master_queue_offset
        self.queue_offset = min(filed_to, data.master_queue_offset) if self.checkpoint.existed else filed_to
        if cq is not None:
            self.queue_offset = max(cq.min_offset, min(self.queue_offset, cq.max_offset))
        log.info(
            "timer store open: read_ms=%d done_pos=%d queue_offset=%d pending=%d log_end=%d",
            self.read_ms, self.done_pos, self.queue_offset, self.pending, self.log.end,
        )  # fmt: skip

    def _refile(self, unit: Unit) -> None:
        """Add ``unit`` to its slot unless the wheel already lists it (idempotent: a slot's
        last position only grows, in log order)."""
        wheel = self._wheel
        slot = wheel.slot(unit.slot_ms)
        if slot is None:
            if unit.slot_ms >= self.read_ms:
                wheel.put(unit.slot_ms, unit.pos, unit.pos, 1)
        elif slot.last_pos < unit.pos:
            wheel.put(unit.slot_ms, slot.first_pos, unit.pos, slot.num + 1)

    def _check_wheel(self) -> None:
        """Count what is pending; rebuild the live slots if any names a unit the log lacks."""
        end = self.log.end
        live = self._wheel.live_slots(self.read_ms)
        if any(s.last_pos >= end or s.first_pos >= end for s in live):
            log.warning("timer wheel names positions past the timer log's end %d: rebuilding it from the log", end)
            for s in live:
                self._wheel.clear(s.time_ms)
            for mf in list(self.log.files.files):
                for unit in self.log.units(mf, 0, mf.wrote):
                    if unit.slot_ms >= self.read_ms:
                        self._refile(unit)
            live = self._wheel.live_slots(self.read_ms)
        self.pending = sum(s.num for s in live)

    def close(self) -> None:
        with self._flush_lock, self._lock:
            if self.wheel is None:
                return
            self._flush_locked()
            self.wheel.close()
            self.wheel = None
            self.log.close()

    @property
    def _wheel(self) -> TimerWheel:
        if self.wheel is None:
            raise RuntimeError("the timer store is not open")
        return self.wheel

    # == filing ======================================================================
    def enqueue(self, max_units: int = 4096) -> int:
        """File up to ``max_units`` new units of rmq_sys_wheel_timer's queue; return how many."""
        with self._lock:
            cq = self.queue()
            if cq is None or self.wheel is None:
                return 0
            if not self.delivering:
                self._apply_heard()
            limit = cq.max_offset if self.delivering else min(cq.max_offset, self.master_queue_offset)
            if self.queue_offset < cq.min_offset:
                log.warning("timer queue offset %d is below the queue's start %d", self.queue_offset, cq.min_offset)
                self.queue_offset = cq.min_offset
            now = self.clock.wall_ms()
            count = 0
            while self.queue_offset < limit and count < max_units:
                raw = cq.read_units(self.queue_offset, min(_CQ_BATCH, limit - self.queue_offset, max_units - count))
                if not raw:
                    break
                for phy, size, slot_ms in CQ_UNIT.iter_unpack(raw):
                    self._file(self.queue_offset, phy, size, slot_ms, now)
                    self.queue_offset += 1
                    count += 1
            return count

    def _file(self, queue_offset: int, phy: int, size: int, slot_ms: int, now: int) -> None:
        p = self.settings.precision_ms
        base = self.read_ms
        target = max(slot_ms // p * p, base)
        magic = MAGIC_DEFAULT
        window = self.settings.roll_window_ms
        if target - base >= window:  # beyond the window: park it, to be filed again later
            magic |= MAGIC_ROLL
            slots = self.settings.roll_window_slots
            target = base + (slots // 2 * p if target - base - window < slots // 3 * p else window)
        wheel = self._wheel
        slot = wheel.slot(target)
        enqueue_ms = min(now, target)
        unit = UNIT.pack(
            UNIT_SIZE, slot.last_pos if slot else -1, magic, enqueue_ms, target - enqueue_ms, phy, size, 0, queue_offset
        )
        pos = self.log.append(unit)
        wheel.put(target, slot.first_pos if slot else pos, pos, (slot.num if slot else 0) + 1)
        self.segments.note(pos, phy, target)
        self.pending += 1
        self.filed += 1

    # == delivery ====================================================================
    def due_units(
        self,
        now_ms: int,
        max_units: int = 256,
        delivered: Sequence[int] = (),
        ahead_ms: int = 0,
        ahead_units: int | None = None,
    ) -> list[DueUnit]:
        """The next units to deliver, in order: those of slot ``read_ms`` not delivered
        yet, up to ``max_units``, once the slot has passed; or, from ``ahead_ms`` before
        that, up to ``ahead_units`` (default ``max_units``): units handed out early are
        only to be read ahead, and must not be written before their slot's end
        (``DueUnit.due_ms``). A slot is left behind only once it has passed and holds
        nothing more; [] when nothing is due. ``delivered`` first reports units written
        since the last call (``delivered``), so the caller's thread never waits for the lock."""
        p = self.settings.precision_ms
        with self._lock:
            for pos in delivered:
                self._delivered(pos)
            if self.wheel is None:
                return []
            while now_ms + ahead_ms >= self.read_ms + p:
                passed = now_ms >= self.read_ms + p
                units = self._peek(max_units if passed or ahead_units is None else ahead_units)
                if units or not passed:
                    return units
                self._advance()
            return []

    def delivered(self, positions: Sequence[int]) -> None:
        """The units at ``positions`` (the first ones ``due_units`` handed out and not yet
        reported, in that order) were written to their topics."""
        with self._lock:
            for pos in positions:
                self._delivered(pos)

    def _delivered(self, pos: int) -> None:
        walk = self._walk
        if self._walk_next < len(walk) and walk[self._walk_next] == pos:
            self._walk_next += 1
            self.done_pos = pos
            self.pending = max(0, self.pending - 1)
            self.delivered_count += 1

    def _peek(self, max_units: int) -> list[DueUnit]:
        """Up to ``max_units`` units of slot ``read_ms`` to deliver next; units that need no
        delivery (unreadable, or known delivered by the old master) are passed on the way.
        [] only once the slot's chain, collected again, holds nothing more."""
        if self._walk_slot != self.read_ms:
            self._walk, self._walk_next, self._walk_top, self._walk_slot = array("q"), 0, self.done_pos, self.read_ms
        out: list[DueUnit] = []
        while not out:
            if self._walk_next >= len(self._walk):
                self._collect()
                if self._walk_next >= len(self._walk):
                    return out
            walk, i = self._walk, self._walk_next
            while i < len(walk) and len(out) < max_units:
                pos = walk[i]
                i += 1
                unit = self.log.read(pos)
                if unit is not None and unit.queue_offset > self.done_qoff:
                    roll = bool(unit.magic & MAGIC_ROLL)
                    out.append(
                        DueUnit(
                            pos, unit.phy, unit.size, roll, unit.slot_ms, unit.queue_offset, unit.enqueue_ms,
                            max(unit.slot_ms, self.read_ms) + self.settings.precision_ms,
                        )
                    )  # fmt: skip
                    continue
                if out:
                    break  # passed over on the next call, once these are delivered
                if unit is None:  # only a damaged log: say so, count it, go on with the rest
                    log.error("timer log unit at %d of slot %d is unreadable; skipped", pos, self.read_ms)
                    self.unreadable += 1
                else:  # the old master delivered it (its records said so)
                    self.pending = max(0, self.pending - 1)
                    self.known_delivered += 1
                self._walk_next, self.done_pos = i, pos
        return out

    def _collect(self) -> None:
        """Walk the slot's chain back from its last unit to the last one collected, and keep
        the new positions in filing order (8 bytes a unit, for the current slot only)."""
        slot = self._wheel.slot(self.read_ms)
        if slot is None or slot.last_pos <= self._walk_top:
            self._walk, self._walk_next = array("q"), 0
            return
        found = array("q")
        pos = slot.last_pos
        while pos > self._walk_top:
            found.append(pos)
            mf = self.log.files.find(pos)
            if mf is None:
                log.error("timer slot %d: unit at %d is gone from the timer log", self.read_ms, pos)
                break
            pos = _PREV.unpack_from(mf.mm, pos - mf.start_offset + 4)[0]
        found.reverse()
        self._walk, self._walk_next, self._walk_top = found, 0, slot.last_pos

    def _advance(self) -> None:
        self.read_ms += self.settings.precision_ms
        self.done_pos = self.done_qoff = -1
        self._walk, self._walk_next, self._walk_top, self._walk_slot = array("q"), 0, -1, -1

    # == roles =======================================================================
    def set_delivering(self, delivering: bool) -> None:
        """Becoming the master starts from the latest progress heard from the old master's
        deliveries; stepping down keeps everything."""
        with self._lock:
            if delivering and not self.delivering:
                self._apply_heard()
                self._walk_slot = -1  # recollect from done_pos
            self.delivering = delivering

    def adopt(self, data: CheckpointData) -> None:
        """A follower takes its master's progress (GET_TIMER_CHECK_POINT): its next slot
        and how far it filed. Ignored while delivering. The slot only moves forward: a slot
        left behind was delivered (by this broker as a master, or by its master, as its
        checkpoint or its delivered records said), so going back would only repeat it."""
        with self._lock:
            if self.delivering or self.wheel is None:
                return
            self._move_to(self.settings.slot_of(data.read_ms), -1)
            self._apply_heard()
            self.master_queue_offset = data.master_queue_offset
            if self.queue_offset > data.master_queue_offset:  # a demoted master: file again as its master did
                self.queue_offset = data.master_queue_offset

    def hear(self, properties_text: str) -> None:
        """(reput thread, every dispatched record) A record the master's timer delivery
        wrote says how far it got (store/timer/delivered_from.py): keep the latest, applied
        when filing or taking over. Lock-free: the master's own records are dispatched on
        its event loop. Believed only if this broker's queue holds that timer record."""
        if self.delivering:
            return
        got = find_in(properties_text)
        if got is None or (self._heard is not None and got <= self._heard):
            return
        cq = self.queue()
        raw = cq.read_units(got.queue_offset, 1) if cq is not None else b""
        if not raw or CQ_UNIT.unpack(raw)[0] != got.phy:
            limited.log(
                log, logging.WARNING, ("timer heard", "mismatch"),
                "a record claims timer delivery from %s, which this broker's timer queue does not hold; ignored",
                got.encode(),
            )  # fmt: skip
            return
        self._heard = got

    def _apply_heard(self) -> None:
        heard = self._heard
        if heard is not None:
            self._move_to(self.settings.slot_of(heard.slot_ms), heard.queue_offset)

    def _move_to(self, read_ms: int, done_qoff: int) -> None:
        """Follow the master to slot ``read_ms``, in which it delivered the units up to
        queue offset ``done_qoff`` (-1: none known)."""
        if read_ms > self.read_ms:
            self._forget_slots(self.read_ms, read_ms)
            self.read_ms, self.done_pos, self.done_qoff, self._walk_slot = read_ms, -1, done_qoff, -1
        elif read_ms == self.read_ms and done_qoff > self.done_qoff:
            self.done_qoff = done_qoff

    def _forget_slots(self, start: int, end: int) -> None:
        p = self.settings.precision_ms
        if (end - start) // p > 100_000:
            self.pending = sum(s.num for s in self._wheel.live_slots(end))
            return
        for t in range(start, end, p):
            slot = self._wheel.slot(t)
            if slot is not None:
                self.pending = max(0, self.pending - slot.num)

    # == persistence =================================================================
    def snapshot(self) -> CheckpointData:
        """The progress as GET_TIMER_CHECK_POINT answers it, without the lock (it is asked
        on the event loop): the filed offset is read before the slot, both only grow, so
        every unit filed below the offset was filed with a ``read_ms`` at most the one
        answered (what a follower's adoption relies on)."""
        return self._data(self.log.files.flushed_offset())

    def _data(self, flushed: int) -> CheckpointData:
        queue_offset = self.queue_offset
        master_offset = queue_offset if self.delivering else self.master_queue_offset
        return CheckpointData(
            read_ms=self.read_ms,
            log_flush_pos=flushed,
            queue_offset=min(queue_offset, master_offset),
            master_queue_offset=master_offset,
            timestamp=self.clock.wall_ms(),
            counter=self.delivered_count + self.filed,
            done_pos=self.done_pos,
        )

    def flush(self) -> None:
        """Timer log, then wheel, then the checkpoint naming how far both are durable.

        The progress is taken under the lock, the fsyncs run outside it: delivery asks for
        due units under the lock, and an fsync under a busy disk takes tens to hundreds of
        milliseconds, which every slot due meanwhile waited for. The checkpoint then says
        where things stood before the fsyncs (every unit it counts was written before them);
        a restart may repeat what was delivered during them, never lose anything."""
        with self._flush_lock:
            with self._lock:
                wheel = self.wheel
                if wheel is None:
                    return
                data = self._data(self.log.end)
            self.log.flush()
            wheel.flush()
            self.checkpoint.save(data)

    def _flush_locked(self) -> None:
        flushed = self.log.flush()
        self._wheel.flush()
        self.checkpoint.save(self._data(flushed))

    def clean(self) -> int:
        """Delete sealed timer-log segments whose units' slots have all been left behind."""
        with self._flush_lock, self._lock:  # not while a flush syncs the segments
            removed = self.log.delete_sealed_while(self._all_passed)
        for start in removed:
            self.segments.forget(start)
        return len(removed)

    def _all_passed(self, mf: MappedFile) -> bool:
        summary = self.segments.summary(mf)
        return summary is None or summary[1] < self.read_ms

    def retention_floor(self) -> int | None:
        """(any thread) The lowest commit-log offset holding the record of a timer not yet
        delivered: retention keeps every commit-log segment from there on. Per timer-log
        segment (store/timer/segments.py): a segment holding a unit of a slot not passed
        yet counts with the lowest record offset of all its units. Timers stored but not
        filed yet count from the first of them. None: nothing pending."""
        with self._lock:
            if self.wheel is None:
                return None
            read_ms = self.read_ms
            files = list(self.log.files.files)
            current = {mf.start_offset: self.segments.current(mf.start_offset) for mf in files}
            floor = self._unfiled_floor()
        for mf in files:  # sealed segments summarised outside the lock (a scan, once)
            summary = current[mf.start_offset] or self.segments.summary(mf)
            if summary is not None and summary[1] >= read_ms:
                floor = summary[0] if floor is None else min(floor, summary[0])
        return floor

    def _unfiled_floor(self) -> int | None:
        cq = self.queue()
        if cq is None or self.queue_offset >= cq.max_offset:
            return None
        raw = cq.read_units(max(self.queue_offset, cq.min_offset), 1)
        return int(CQ_UNIT.unpack(raw)[0]) if raw else None

    def progress(self) -> TimerProgress:
        cq = self.queue()
        return TimerProgress(
            read_ms=self.read_ms,
            queue_offset=self.queue_offset,
            queue_max=cq.max_offset if cq is not None else 0,
            pending=self.pending,
            filed=self.filed,
            delivered=self.delivered_count,
            log_end=self.log.end,
        )
