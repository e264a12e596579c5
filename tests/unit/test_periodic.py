"""aio/periodic.py: rounds keep coming after one raises, the interval is asked anew each
time, start/stop are idempotent and stop waits for the task to end."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ledgermq.aio.periodic import Periodic

pytestmark = pytest.mark.timeout(30)


async def _until(cond: object, limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.001)


def test_a_failing_round_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def round_() -> None:
        calls.append(len(calls))
        if len(calls) == 2:
            raise RuntimeError("boom")

    async def main() -> None:
        p = Periodic("t", round_, 0.001, first_delay=0)
        p.start()
        await _until(lambda: len(calls) >= 4)
        assert p.running and p.failures == 1
        await p.stop()
        assert not p.running

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert "t: round failed (failure 1)" in caplog.text and "boom" in caplog.text


def test_async_rounds_a_changing_interval_and_idempotent_start_stop() -> None:
    seen: list[float] = []
    interval = [0.001]

    async def round_() -> None:
        seen.append(interval[0])
        if len(seen) == 3:
            interval[0] = 0.002

    async def main() -> None:
        p = Periodic("t", round_, lambda: interval[0])
        p.start()
        p.start()  # no second task
        await _until(lambda: len(seen) >= 5)
        await p.stop()
        await p.stop()
        count = len(seen)
        await asyncio.sleep(0.01)
        assert len(seen) == count  # stopped means stopped
        assert seen[:3] == [0.001] * 3 and seen[3] == 0.002

    asyncio.run(main())


def test_first_delay_defaults_to_one_interval() -> None:
    calls: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        p = Periodic("t", lambda: calls.append(loop.time() - start), 0.05)
        p.start()
        await _until(lambda: calls)
        await p.stop()
        assert calls[0] >= 0.045

    asyncio.run(main())
