"""Delivery's pacing on a fake performance counter: what counts as other work on the loop."""

from __future__ import annotations

import asyncio

import pytest

from ledgermq.broker.timer.pacing import Pace, PaceSettings


class FakePerf:
    """A performance counter that moves only when told: the work each callback stands for."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def pace_on(perf: FakePerf, slept: list[float]) -> Pace:
    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    return Pace(PaceSettings(busy_share=0.1, busy_lag_s=0.0005), perf=perf, sleep=sleep)


def test_the_chunk_s_own_end_of_turn_step_is_its_work_not_a_reason_to_rest() -> None:
    async def main() -> None:
        perf, slept = FakePerf(), list[float]()
        pace = pace_on(perf, slept)
        for _ in range(50):
            perf.spend(0.001)  # 32 puts
            await pace.end_chunk(lambda: perf.spend(0.002))  # dispatching them: longer than busy_lag_s
        assert pace.rests == 0 and slept == []  # an idle broker delivers flat out

    asyncio.run(main())


def test_other_work_waiting_on_the_loop_makes_delivery_rest_to_its_share() -> None:
    async def main() -> None:
        perf, slept = FakePerf(), list[float]()
        pace = pace_on(perf, slept)
        perf.spend(0.001)  # 32 puts
        asyncio.get_running_loop().call_soon(perf.spend, 0.004)  # a send waiting for the loop
        await pace.end_chunk(lambda: perf.spend(0.001))  # and the chunk's own dispatch
        assert pace.rests == 1 and slept == [pytest.approx(0.002 * 9)]  # 2 ms of work: 10% of 20 ms
        perf.spend(0.001)
        await pace.end_chunk(None)  # the loop is free again: no rest
        assert pace.rests == 1 and len(slept) == 1

    asyncio.run(main())
