"""The timer service: files timers on every broker, delivers them on the master.

Filing (``start_filing``, every broker, for as long as it runs): every ~100 ms (scaled
with timerPrecisionMs, as RocketMQ's) the new units of rmq_sys_wheel_timer's queue go
into the wheel, in a worker thread; every timerFlushIntervalMs the timer log, the wheel
and the checkpoint are made durable; every 30 s timer-log segments wholly in the past
are deleted. A follower files only what its master had filed (``adopt``).

Delivery (``start`` / ``stop``, the master only: BrokerApp starts and stops it where it
starts and stops the delay-level service, so it moves with mastership): a slot's first
units (up to ``READ_AHEAD_UNITS``) and their records are read (in the thread) up to
``READ_AHEAD_MS`` before its end, so that when it ends only the puts remain; they are
written to their real topics through ``put``, the broker's writer (the store natively,
the Raft group in DLedger mode), in chunks paced so that sends keep the loop
(broker/timer/pacing.py), and the rest of the slot is read a batch at a time. Nothing is
written before its slot's end. A unit counts as delivered only once ``put`` answered
PUT_OK; a refusal or an unknown outcome leaves it, to be tried again (half a precision
step later): at least once, never lost. Every delivered message says which timer it was
(store/timer/delivered_from.py); every broker listens to its dispatched records, so a
follower knows, record by record, how far its master's delivery got, and one taking over
waits until it has dispatched everything it holds, then skips what the old master
delivered. Retention keeps the commit-log records of pending timers
(store/timer/retention.py). A record the commit log no longer holds anyway (a truncation
replaced it, a disk past the forcible ratio in DLedger mode) cannot be delivered: that is
logged and counted as ``skipped``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.timer.convert import NotATimerRecord, due_message
from ledgermq.broker.timer.pacing import Pace, PaceSettings, Sleep
from ledgermq.clock import Clock
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import properties as P
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutResult
from ledgermq.store.timer.checkpoint import CheckpointData
from ledgermq.store.timer.delivered_from import DELIVERED_FROM
from ledgermq.store.timer.intercept import TIMER_TOPIC
from ledgermq.store.timer.retention import guard_pending_timers
from ledgermq.store.timer.settings import TimerSettings
from ledgermq.store.timer.timer_store import DueUnit, TimerStore
from ledgermq.util.latency import LatencyHistogram
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)

Put = Callable[[MessageInput], Awaitable[PutResult]]
LATENESS_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
FILE_BATCH = 2048
CATCH_UP_S = 5.0  # a new master waits at most this long to dispatch what it holds before delivering
DUE_BATCH = 256
READ_AHEAD_MS = 500  # a slot's first units are read this long (at most half a step) before its end
READ_AHEAD_UNITS = 2048  # at most this many (~3 MB held until the slot ends with 100-byte bodies)
BATCH_BYTES = 4 << 20  # records read in one go (at least one): large messages make smaller batches
IDLE_MAX_S = 0.5  # with nothing due, look again at least this often
CLEAN_INTERVAL_S = 30.0
RATE_WINDOW_S = 10.0


class TimerService:
    def __init__(
        self,
        store: MessageStore,
        put: Put,
        clock: Clock,
        *,
        settings: TimerSettings | None = None,
        pace: PaceSettings | None = None,
        on_written: Callable[[], None] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.store = store
        self.put = put
        self.clock = clock
        self.settings = settings or store.timer
        self.pace_settings = pace or PaceSettings()
        # the broker's end-of-turn step, run now: what delivery wrote is dispatched and
        # replicated within its chunk, and pacing counts that as delivery's own work
        self.on_written = on_written
        self.sleep = sleep  # every wait of delivery: tests drive it on their clock
        self.ahead_ms = min(READ_AHEAD_MS, self.settings.precision_ms // 2)
        self.timers = TimerStore(
            Path(store.config.root_dir), self.settings, lambda: store.queues.get(TIMER_TOPIC, 0), clock
        )
        p = self.settings.precision_ms
        self._filing = Periodic("timer-filing", self._file_round, 0.1 * p / 1000, first_delay=0)
        self._delivery: asyncio.Task[None] | None = None
        self._done: list[int] = []  # delivered, not yet reported to the timer store
        self._opened = False
        self._last_flush = self.clock.monotonic()
        self._last_clean = self.clock.monotonic()
        self.lateness = LatencyHistogram(LATENESS_BUCKETS)  # seconds past the slot's end
        self.recent_lateness_ms: deque[int] = deque(maxlen=4096)
        self.delivered = 0
        self.rolled = 0
        self.skipped = 0
        self.put_failures = 0
        self.loop_failures = 0
        self._rates: deque[tuple[float, int, int]] = deque()

    # == lifecycle ===================================================================
    async def open(self) -> None:
        """Open the wheel and log (after the store started), listen to dispatched records for
        the master's delivery progress, guard pending timers' records from retention."""
        await asyncio.to_thread(self.timers.open)
        self._opened = True
        self.store.add_dispatch_hook(self._heard, only_with=DELIVERED_FROM)  # nearly no record has it
        guard_pending_timers(self.store, self.timers.retention_floor)

    def _heard(self, req: DispatchRequest) -> None:
        self.timers.hear(req.properties)

    def start_filing(self) -> None:
        self._filing.start()

    @property
    def running(self) -> bool:
        """Delivering (this broker is the master)."""
        return self._delivery is not None and not self._delivery.done()

    def start(self) -> None:
        if not self.running:
            log.info("timer delivery started")
            self._delivery = asyncio.create_task(self._deliver(), name="timer-delivery")

    async def stop(self) -> None:
        task, self._delivery = self._delivery, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            log.info("timer delivery stopped")
        if self._opened:
            done, self._done = self._done, []
            await asyncio.to_thread(self.timers.delivered, done)
            await asyncio.to_thread(self.timers.set_delivering, False)
            try:
                await asyncio.to_thread(self.timers.flush)
            except OSError as exc:
                # Losing mastership must go on (the caller is the role follower) even on a full
                # or failing disk: delivery has stopped; the checkpoint is written at the next
                # flush, and a restart before it delivers again what was delivered since the last
                # one (the documented restart window, docs/timers.md).
                log.error("timer delivery stopped, but its checkpoint could not be written: %s", exc)

    async def close(self) -> None:
        """Stop delivering and filing, make everything durable, close the files."""
        await self.stop()
        await self._filing.stop()
        if self._opened:
            await asyncio.to_thread(self.timers.close)
            self._opened = False

    async def adopt(self, data: CheckpointData) -> None:
        """A follower takes its master's progress (GET_TIMER_CHECK_POINT)."""
        await asyncio.to_thread(self.timers.adopt, data)

    def snapshot(self) -> CheckpointData:
        return self.timers.snapshot()

    # == filing ======================================================================
    async def _file_round(self) -> None:
        while await asyncio.to_thread(self.timers.enqueue, FILE_BATCH) >= FILE_BATCH:
            pass
        now = self.clock.monotonic()
        if now - self._last_flush >= self.settings.flush_interval_ms / 1000:
            self._last_flush = now
            await asyncio.to_thread(self.timers.flush)
        if now - self._last_clean >= CLEAN_INTERVAL_S:
            self._last_clean = now
            removed = await asyncio.to_thread(self.timers.clean)
            if removed:
                log.info("deleted %d timer-log segment(s) whose timers are all delivered", removed)
        self._sample(now)

    # == delivery ====================================================================
    async def _deliver(self) -> None:
        await asyncio.to_thread(self._catch_up)
        await asyncio.to_thread(self.timers.set_delivering, True)
        p = self.settings.precision_ms
        while True:
            try:
                now = self.clock.wall_ms()
                done, self._done = self._done, []
                batch = await asyncio.to_thread(self._due_batch, now, done)
                if not batch:
                    await self.sleep(self._idle_s(now))
                    continue
                await self._until(batch[0][0].due_ms)  # read ahead: written at the slot's end, not before
                if not await self._write(batch):
                    await self.sleep(p / 2000)  # refused: the same unit again shortly
            except asyncio.CancelledError:
                raise
            except Exception:
                self.loop_failures += 1
                log.exception("timer delivery round failed (failure %d); going on", self.loop_failures)
                await self.sleep(1.0)

    def _idle_s(self, now_ms: int) -> float:
        """Nothing to hand out at ``now_ms``: how long until the next slot's units are to be
        read ahead, or, inside that window (it held nothing yet), until its end."""
        due = self.timers.read_ms + self.settings.precision_ms
        wake = due - self.ahead_ms if now_ms < due - self.ahead_ms else due
        return min(IDLE_MAX_S, max(0.001, (wake - now_ms) / 1000))

    async def _until(self, due_ms: int) -> None:
        """Wait until the clock reads ``due_ms`` (the loop's timer runs on another clock)."""
        while (left_ms := due_ms - self.clock.wall_ms()) > 0:
            await self.sleep(left_ms / 1000)

    def _catch_up(self) -> None:
        """(worker thread) Before delivering, dispatch everything this broker holds, the old
        master's last deliveries included (DLedger: committed by this new leader's first
        entry), so the progress they carry is known. Bounded: without a quorum nothing
        commits, and then nothing can be delivered anyway."""
        store = self.store
        target = store.commitlog.end_pos if isinstance(store, DLedgerMessageStore) else store.commitlog.max_offset
        if not self.store.wait_dispatched(target, CATCH_UP_S):
            log.warning(
                "timer delivery starts before this broker dispatched all it holds (to %d) within %.0fs: "
                "what the old master delivered last may be delivered again", target, CATCH_UP_S,
            )  # fmt: skip

    def _due_batch(self, now_ms: int, done: list[int]) -> list[tuple[DueUnit, MessageInput | None]]:
        """(worker thread) Report what was delivered, take the next due units, read them
        (up to ``BATCH_BYTES`` of records: the units left over are handed out again next time,
        since only what was delivered moves the timer store on)."""
        units = self.timers.due_units(now_ms, DUE_BATCH, done, self.ahead_ms, READ_AHEAD_UNITS)
        out: list[tuple[DueUnit, MessageInput | None]] = []
        budget = BATCH_BYTES
        for unit in units:
            if budget <= 0:
                break
            budget -= unit.size
            record = self.store.commitlog.read(unit.phy, unit.size)
            msg: MessageInput | None = None
            if record is None:
                log.error("timer at commit-log offset %d (%d bytes) is no longer stored; skipped", unit.phy, unit.size)
            else:
                try:
                    msg = due_message(record, unit, now_ms)
                except (NotATimerRecord, RemoteProtocolError, ValueError) as exc:
                    log.error("timer at commit-log offset %d cannot be delivered: %s; skipped", unit.phy, exc)
            out.append((unit, msg))
        return out

    async def _write(self, batch: list[tuple[DueUnit, MessageInput | None]]) -> bool:
        """Put each due message in order; False at the first refusal (it stays due)."""
        pace = Pace(self.pace_settings, sleep=self.sleep)
        p = self.settings.precision_ms
        chunk = self.pace_settings.chunk
        for i, (unit, msg) in enumerate(batch, 1):
            if msg is None:
                self.skipped += 1
                self._done.append(unit.pos)
                continue
            msg.properties[P.TIMER_DEQUEUE_MS] = str(self.clock.wall_ms())  # read ahead: stamped now
            result = await self.put(msg)
            if not result.ok:
                self.put_failures += 1
                limited.log(
                    log, logging.WARNING, ("timer put", result.status), "timer delivery to %s refused: %s %s; retrying",
                    msg.topic, result.status.value, result.remark,
                )  # fmt: skip
                return False
            self._done.append(unit.pos)
            if unit.roll:
                self.rolled += 1
            else:
                self.delivered += 1
                out_ms = msg.properties.get(P.TIMER_OUT_MS, "")
                due_ms = (int(out_ms) if out_ms.isdigit() else unit.slot_ms) + p
                late_ms = max(0, self.clock.wall_ms() - due_ms)
                self.lateness.observe(late_ms / 1000)
                self.recent_lateness_ms.append(late_ms)
            if i % chunk == 0:
                await pace.end_chunk(self.on_written)
        if self.on_written is not None:
            self.on_written()
        return True

    # == figures =====================================================================
    def _sample(self, now: float) -> None:
        self._rates.append((now, self.timers.filed, self.timers.delivered_count))
        while len(self._rates) > 2 and now - self._rates[0][0] > RATE_WINDOW_S:
            self._rates.popleft()

    def rates(self) -> tuple[float, float]:
        """(filed, delivered) per second over the last ~10 s."""
        if len(self._rates) < 2:
            return 0.0, 0.0
        (t0, f0, d0), (t1, f1, d1) = self._rates[0], self._rates[-1]
        span = max(t1 - t0, 1e-6)
        return (f1 - f0) / span, (d1 - d0) / span

    def lateness_percentile_ms(self, q: float) -> int:
        """The ``q`` quantile of the last 4096 deliveries' lateness, in ms (0 with none)."""
        values = sorted(self.recent_lateness_ms)
        if not values:
            return 0
        return values[min(len(values) - 1, int(q * len(values)))]

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ 5's brokerStatus timer keys, and ledgermq's own (timerPending...)."""
        progress = self.timers.progress()
        filed_tps, delivered_tps = self.rates()
        behind_s = max(0, (self.clock.wall_ms() - progress.read_ms) // 1000) if self.running else 0
        offset_behind = max(0, progress.queue_max - progress.queue_offset)
        return {
            "timerReadBehind": str(behind_s),
            "timerOffsetBehind": str(offset_behind),
            "timerCongestNum": str(progress.pending),
            "timerEnqueueTps": f"{filed_tps:.1f}",
            "timerDequeueTps": f"{delivered_tps:.1f}",
            "timerPending": str(progress.pending + offset_behind),
            "timerDelivered": str(self.delivered),
            "timerSkipped": str(self.skipped + self.timers.unreadable),
            "timerKnownDelivered": str(self.timers.known_delivered),
            "timerLatenessP50Ms": str(self.lateness_percentile_ms(0.5)),
            "timerLatenessP99Ms": str(self.lateness_percentile_ms(0.99)),
        }
