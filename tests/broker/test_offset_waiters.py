"""OffsetWaiters: SYNC_FLUSH answers released by the flush thread's reports, in order."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ledgermq.broker.offset_waiters import OffsetWaiters

T = TypeVar("T")


def _run(coro_fn: Callable[[asyncio.AbstractEventLoop], Coroutine[Any, Any, T]]) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def test_each_waiter_is_released_only_when_its_own_offset_is_reached() -> None:
    async def body(loop: asyncio.AbstractEventLoop) -> list[tuple[int, bool, str]]:
        waiters = OffsetWaiters(loop, timeout_s=30.0)
        told: list[tuple[int, bool, str]] = []
        for offset in (100, 200, 300):
            waiters.add(offset, lambda ok, why, o=offset: told.append((o, ok, why)))
        waiters.reached(199)
        assert told == [(100, True, "")]
        waiters.reached(300)
        assert len(waiters) == 0
        waiters.add(250, lambda ok, why: told.append((250, ok, why)))  # already durable
        return told

    assert _run(body) == [(100, True, ""), (200, True, ""), (300, True, ""), (250, True, "")]


def test_an_out_of_order_offset_is_released_late_never_early() -> None:
    async def body(loop: asyncio.AbstractEventLoop) -> list[int]:
        waiters = OffsetWaiters(loop, timeout_s=30.0)
        told: list[int] = []
        waiters.add(500, lambda ok, why: told.append(500))
        waiters.add(100, lambda ok, why: told.append(100))
        waiters.reached(100)
        assert told == []  # behind 500: not yet, but not wrongly either
        waiters.reached(500)
        return told

    assert _run(body) == [500, 100]


def test_waiters_time_out_in_order_and_a_failure_is_sticky() -> None:
    async def body(loop: asyncio.AbstractEventLoop) -> list[tuple[int, bool, str]]:
        waiters = OffsetWaiters(loop, timeout_s=0.05)
        told: list[tuple[int, bool, str]] = []
        waiters.add(10, lambda ok, why: told.append((10, ok, why)))
        deadline = loop.time() + 5.0
        while not told and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert told == [(10, False, "")]  # timed out: FLUSH_DISK_TIMEOUT without a reason
        waiters.timeout_s = 30.0
        waiters.add(20, lambda ok, why: told.append((20, ok, why)))
        waiters.reached(15, "flush failed: [Errno 5] EIO")
        waiters.add(5, lambda ok, why: told.append((5, ok, why)))  # after a failure: nothing is durable
        return told

    assert _run(body) == [
        (10, False, ""),
        (20, False, "flush failed: [Errno 5] EIO"),
        (5, False, "flush failed: [Errno 5] EIO"),
    ]


def test_the_flush_thread_reports_through_the_loop() -> None:
    async def body(loop: asyncio.AbstractEventLoop) -> list[bool]:
        waiters = OffsetWaiters(loop, timeout_s=30.0)
        done = loop.create_future()
        waiters.add(4096, lambda ok, why: done.set_result(ok))
        thread = threading.Thread(target=waiters.report_from_thread, args=(4096, None))
        thread.start()
        thread.join()
        return [await asyncio.wait_for(done, 5.0)]

    assert _run(body) == [True]
