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
from pathlib import Path
from typing import Any

from ledgermq.broker.timer.pacing import PaceSettings
from ledgermq.broker.timer.service import READ_AHEAD_UNITS, TimerService
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


def put_timer(store: MessageStore, i: int, at_ms: int) -> None:
    props = {P.TIMER_DELIVER_MS: str(at_ms), P.UNIQ_KEY: f"{i:032X}"}
    assert store.put_message(MessageInput(topic="Orders", body=b"t%d" % i, properties=props)).ok


def test_a_slot_is_read_ahead_and_written_exactly_at_its_end(store_factory: StoreFactory, tmp_path: Path) -> None:
    clock = ManualClock(wall_ms=SLOT_END - 2963)  # not on a step's edge
    store = store_factory(clock=clock, mapped_file_size_commitlog=1 << 20)
    for i in range(TIMERS):  # all due in the step [SLOT_END - 1000, SLOT_END)
        put_timer(store, i, SLOT_END - 900 + i * 800 // TIMERS)
    assert store.wait_dispatched()
    puts: list[tuple[int, str]] = []  # (clock at the put, its body)
    reads: list[tuple[int, int]] = []  # (clock at the read, units handed out)
    late: list[int] = []  # a timer sent into the slot after it was read ahead

    async def put(msg: MessageInput) -> PutResult:
        puts.append((clock.wall_ms(), msg.body.decode()))
        return store.put_message(msg)

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    async def main() -> None:
        # resting is judged on real time (tests/timer/test_pacing.py): off here, so that only
        # delivery's own waits move the clock
        service = TimerService(store, put, clock, pace=PaceSettings(busy_lag_s=math.inf), sleep=sleep)
        await service.open()
        service.timers.set_delivering(True)  # files everything (a follower files what its master did)
        assert await asyncio.to_thread(service.timers.enqueue, 10_000) == TIMERS
        due_units = service.timers.due_units

        def spied(*args: Any, **kwargs: Any) -> list[DueUnit]:
            units = due_units(*args, **kwargs)
            if units:
                reads.append((clock.wall_ms(), len(units)))
                if len(reads) == 1 and clock.wall_ms() < SLOT_END - 1:  # sent after its slot was read ahead
                    put_timer(store, TIMERS, SLOT_END - 1)
                    assert store.wait_dispatched() and service.timers.enqueue() == 1
                    late.append(TIMERS)
            return units

        service.timers.due_units = spied  # type: ignore[method-assign]
        service.start()
        deadline = time.monotonic() + 60
        while service.delivered < TIMERS + len(late):
            assert time.monotonic() < deadline, f"{service.delivered} delivered"
            await asyncio.sleep(0.01)
        await service.close()

    asyncio.run(main())
    assert reads[0][0] < SLOT_END and reads[0][1] == READ_AHEAD_UNITS and late  # read before the slot ended
    assert all(at == SLOT_END for at, _ in reads[1:])  # the rest once it had
    assert sorted({at for at, _ in puts}) == [SLOT_END]  # none early, none after an extra wait
    assert [body for _, body in puts] == [f"t{i}" for i in range(TIMERS + 1)]  # in filing order, the late one too
    assert store.wait_dispatched()
    stamps: list[int] = []
    while got := store.get_message("Orders", 0, len(stamps), 32).messages:
        stamps += [int(decode_record(raw, check_crc=False).properties[P.TIMER_DEQUEUE_MS]) for raw in got]
    assert stamps == [SLOT_END] * (TIMERS + 1)  # stamped when written, not when read ahead
