"""A scaled-down ``ledgermq bench timers`` (the bench's own broker and senders, real
processes on 127.0.0.1): 10,000 pending timers filed into the wheel leave the broker's heap
(anonymous RSS) where it was; nothing per timer is held in memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.bench.timer_bench import (
    TIMER_TOPIC,
    BurstFigures,
    BurstRound,
    TimerBroker,
    _settled_rss,
    send_all,
    wait_status,
)
from ledgermq.client import Message

TIMERS = 10_000
MIB = 1024 * 1024
ANON_GROWTH_MAX = 4 * MIB  # 400 bytes a timer would already cross it


def test_ten_thousand_pending_timers_do_not_grow_the_broker_heap(tmp_path: Path) -> None:
    with TimerBroker(tmp_path, precision_ms=1000) as broker:

        async def run() -> tuple[tuple[int, int], tuple[int, int], dict[str, str]]:
            body = b"t" * 100
            await send_all(broker.namesrv, lambda i: Message("Warm", body), 200, 8, "warm")  # the send path's own
            idle = await _settled_rss(broker.pid, 2.0)
            sent, _s = await send_all(
                broker.namesrv, lambda i: Message(TIMER_TOPIC, body, delay=3600 + i % 600), TIMERS, 64, "timers"
            )
            assert sent == TIMERS
            filed = lambda st: int(st["timerOffsetBehind"]) == 0 and int(st["timerCongestNum"]) == TIMERS  # noqa: E731
            status = await wait_status(broker, filed, 60)
            return idle, await _settled_rss(broker.pid, 2.0), status

        idle, pending, status = asyncio.run(run())
    growth = pending[0] - idle[0]
    print(f"\n{TIMERS:,} pending timers: anonymous RSS {idle[0] / MIB:.1f} -> {pending[0] / MIB:.1f} MiB, "
          f"file RSS {idle[1] / MIB:.1f} -> {pending[1] / MIB:.1f} MiB")  # fmt: skip
    assert int(status["timerPending"]) == TIMERS and int(status["timerDelivered"]) == 0
    assert growth <= ANON_GROWTH_MAX, f"the heap grew {growth / MIB:.1f} MiB with {TIMERS:,} pending timers"


def test_burst_ratios_pair_each_burst_round_with_the_round_beside_it() -> None:
    def r(i: int, with_burst: bool, per_s: float) -> BurstRound:
        return BurstRound(i, with_burst, per_s, 1.0, 10.0, 0, 1.0)

    abba = BurstFigures(10, (r(1, False, 100.0), r(2, True, 90.0), r(3, True, 60.0), r(4, False, 50.0)))
    assert abba.ratios == [0.9, 1.2] and abba.ratio == 1.05  # A1 B1, then B2 A2: not B / mean(all A)
    more = (r(5, False, 100.0), r(6, True, 70.0), r(7, True, 50.0), r(8, False, 100.0))
    twice = BurstFigures(10, (*abba.rounds, *more))
    assert twice.ratios == [0.9, 1.2, 0.7, 0.5] and twice.ratio == 0.8
    assert abba.rounds[0].broker_busy == 0.1
