"""PullHoldService: arrivals reported by the reput thread reach parked pulls, batched into
one turn of the loop, and none is lost while a batch is being drained."""

from __future__ import annotations

import asyncio
import threading

from ledgermq.broker.long_polling import PullHoldService


def test_arrivals_from_another_thread_wake_every_waiter_in_one_loop_turn() -> None:
    async def main() -> None:
        hold = PullHoldService()
        loop = asyncio.get_running_loop()
        hold.bind(loop)
        drains = 0
        real_drain = hold._drain_arrivals

        def counting_drain() -> None:
            nonlocal drains
            drains += 1
            real_drain()

        hold._drain_arrivals = counting_drain  # type: ignore[method-assign]
        waits = [asyncio.create_task(hold.wait("T", q, 0, 5.0)) for q in range(8)]
        await asyncio.sleep(0)  # every pull is parked

        def reput_round() -> None:  # one dispatch round reports every queue
            for q in range(8):
                hold.arrived_threadsafe("T", q, 1)

        t = threading.Thread(target=reput_round)
        t.start()
        t.join()
        assert await asyncio.wait_for(asyncio.gather(*waits), 2.0) == [True] * 8
        assert drains == 1
        assert hold.held == 0

    asyncio.run(main())


def test_an_arrival_during_a_drain_is_not_lost() -> None:
    async def main() -> None:
        hold = PullHoldService()
        hold.bind(asyncio.get_running_loop())
        first = asyncio.create_task(hold.wait("T", 0, 0, 5.0))
        second = asyncio.create_task(hold.wait("T", 1, 0, 5.0))
        await asyncio.sleep(0)
        reported = threading.Event()

        def late_arrival() -> None:
            hold.arrived_threadsafe("T", 1, 1)
            reported.set()

        real_drain = hold._drain_arrivals

        def drain_then_report_more() -> None:
            hold._drain_arrivals = real_drain  # type: ignore[method-assign]  # once
            real_drain()
            t = threading.Thread(target=late_arrival)  # arrives after this batch was taken
            t.start()
            t.join()

        hold._drain_arrivals = drain_then_report_more  # type: ignore[method-assign]
        threading.Thread(target=hold.arrived_threadsafe, args=("T", 0, 1)).start()
        assert await asyncio.wait_for(first, 2.0)
        assert reported.wait(2.0)
        assert await asyncio.wait_for(second, 2.0)

    asyncio.run(main())


def test_an_arrival_nobody_waits_for_costs_the_loop_nothing_and_a_late_waiter_rereads() -> None:
    """The reput thread skips queues without waiters; a pull that registers after such an
    arrival sees the queue's new max offset on its re-read instead of sleeping its timeout."""

    async def main() -> None:
        hold = PullHoldService()
        hold.bind(asyncio.get_running_loop())
        max_offset = 0
        t = threading.Thread(target=hold.arrived_threadsafe, args=("T", 0, 1))
        max_offset = 1  # the dispatch that reports the arrival moved the queue first
        t.start()
        t.join()
        assert not hold._drain_scheduled and not hold._arrivals
        # True: woken, not timed out (nothing else will report an arrival, so the re-read did it)
        assert await asyncio.wait_for(hold.wait("T", 0, 0, 60.0, current_max=lambda: max_offset), 30)
        assert hold.held == 0
        # Nothing new: the re-read says so and the waiter parks until its timeout.
        assert not await hold.wait("T", 0, 1, 0.05, current_max=lambda: max_offset)

    asyncio.run(main())
