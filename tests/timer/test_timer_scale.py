"""A scaled-down ``ledgermq bench timers`` (the bench's own broker and senders, real
processes on 127.0.0.1): 10,000 pending timers filed into the wheel leave the broker's heap
(anonymous RSS) where it was; nothing per timer is held in memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.bench.timer_bench import TIMER_TOPIC, TimerBroker, _settled_rss, send_all, wait_status
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
