"""When delivery reads and writes a slot, on an injected clock (no wall-clock luck).

The service's every wait goes through the injected ``sleep``, which moves the clock by
what it was asked: the clock reads a slot's end exactly when delivery waited for it, and
any extra wait (a polling period, a rest) shows as time past it. A put's clock reading
is therefore the lateness delivery itself adds, in scheduling steps rather than CPU time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from ledgermq.broker.timer.pacing import PaceSettings
from ledgermq.broker.timer.service import BATCH_BYTES, READ_AHEAD_UNITS, TimerService
from ledgermq.clock import ManualClock
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutResult
from ledgermq.store.timer.timer_store import DueUnit

StoreFactory = Callable[..., MessageStore]
SLOT_END = 1_700_000_003_000
TIMERS = READ_AHEAD_UNITS + 300  # more than is read ahead: the rest is read once the slot has ended


def put_timer(store: MessageStore, i: int, at_ms: int, body: bytes = b"t") -> None:
    props = {P.TIMER_DELIVER_MS: str(at_ms), P.UNIQ_KEY: f"{i:032X}"}
    assert store.put_message(MessageInput(topic="Orders", body=body, properties=props)).ok


class VirtualDelivery:
    """A timer service on ``store`` whose waits move ``clock``; what it read and wrote, when."""

    def __init__(self, store: MessageStore, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.puts: list[tuple[int, int]] = []  # (clock at the put, the timer's number)
        self.reads: list[tuple[int, int]] = []  # (clock at the read, units handed out)
        self.writes: list[int] = []  # messages written per batch
        self.on_read: Callable[[TimerService], None] = lambda _service: None

    async def _put(self, msg: MessageInput) -> PutResult:
        self.puts.append((self.clock.wall_ms(), int(msg.properties[P.UNIQ_KEY], 16)))
        return self.store.put_message(msg)

    async def _sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await asyncio.sleep(0)

    def run(self, filed: int, delivered: Callable[[], int]) -> None:
        async def main() -> None:
            # resting is judged on the loop's CPU clock (tests/timer/test_pacing.py): off here,
            # so that only delivery's own waits move the clock
            pace = PaceSettings(busy_lag_s=math.inf)
            service = TimerService(self.store, self._put, self.clock, pace=pace, sleep=self._sleep)
            await service.open()
            service.timers.set_delivering(True)  # files everything (a follower files what its master did)
            assert await asyncio.to_thread(service.timers.enqueue, 10_000) == filed
            due_units, write = service.timers.due_units, service._write

            def spied_due_units(*args: Any, **kwargs: Any) -> list[DueUnit]:
                units = due_units(*args, **kwargs)
                if units:
                    self.reads.append((self.clock.wall_ms(), len(units)))
                    self.on_read(service)
                return units

            async def spied_write(batch: list[tuple[DueUnit, MessageInput | None]]) -> bool:
                self.writes.append(len(batch))
                return await write(batch)

            service.timers.due_units = spied_due_units  # type: ignore[method-assign]
            service._write = spied_write  # type: ignore[method-assign]
            service.start()
            deadline = time.monotonic() + 60
            while service.delivered < delivered():
                assert time.monotonic() < deadline, f"{service.delivered} delivered"
                await asyncio.sleep(0.01)
            await service.close()

        asyncio.run(main())

    def dequeue_stamps(self) -> list[int]:
        assert self.store.wait_dispatched()
        stamps: list[int] = []
        while got := self.store.get_message("Orders", 0, len(stamps), 32).messages:
            stamps += [int(decode_record(raw, check_crc=False).properties[P.TIMER_DEQUEUE_MS]) for raw in got]
        return stamps


def test_a_slot_is_read_ahead_and_written_exactly_at_its_end(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=SLOT_END - 2963)  # not on a step's edge
    store = store_factory(clock=clock, mapped_file_size_commitlog=1 << 20)
    for i in range(TIMERS):  # all due in the step [SLOT_END - 1000, SLOT_END)
        put_timer(store, i, SLOT_END - 900 + i * 800 // TIMERS)
    assert store.wait_dispatched()
    run = VirtualDelivery(store, clock)
    late: list[int] = []  # a timer sent into the slot after it was read ahead

    def send_late(service: TimerService) -> None:
        if not late and clock.wall_ms() < SLOT_END - 1:
            put_timer(store, TIMERS, SLOT_END - 1)
            assert store.wait_dispatched() and service.timers.enqueue() == 1
            late.append(TIMERS)

    run.on_read = send_late
    run.run(TIMERS, lambda: TIMERS + len(late))
    assert run.reads[0][0] < SLOT_END and run.reads[0][1] == READ_AHEAD_UNITS and late  # read before the slot ended
    assert all(at == SLOT_END for at, _ in run.reads[1:])  # the rest once it had
    assert sorted({at for at, _ in run.puts}) == [SLOT_END]  # none early, none after an extra wait
    assert [i for _, i in run.puts] == list(range(TIMERS + 1))  # in filing order, the late one too
    assert run.dequeue_stamps() == [SLOT_END] * (TIMERS + 1)  # stamped when written, not when read ahead


def test_large_messages_are_read_a_few_at_a_time_and_all_delivered_once(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=SLOT_END - 2963)
    store = store_factory(clock=clock, mapped_file_size_commitlog=32 << 20)
    big = b"x" * (1 << 20)
    for i in range(12):  # 12 MiB due in one step: reading them all ahead would hold all of it
        put_timer(store, i, SLOT_END - 500, big)
    assert store.wait_dispatched()
    run = VirtualDelivery(store, clock)
    run.run(12, lambda: 12)
    assert max(run.writes) * len(big) <= BATCH_BYTES + len(big)  # about BATCH_BYTES at a time
    assert [i for _, i in run.puts] == list(range(12))  # each once, in order
    assert sorted({at for at, _ in run.puts}) == [SLOT_END]
