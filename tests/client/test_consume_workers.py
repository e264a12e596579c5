"""ConsumeWorkers: the push consumer's pool of consume tasks (client/push/consume_workers.py)."""

from __future__ import annotations

import asyncio
import gc
import warnings

from ledgermq.client.push.consume_workers import ConsumeWorkers, Request


async def _plain(request: Request) -> None:
    try:
        await request
    except Exception:
        pass  # the service's runner logs; these tests only need it not to raise


def test_listeners_that_do_not_wait_are_drained_by_one_task_within_the_turn() -> None:
    async def body() -> tuple[int, int, list[int]]:
        pool = ConsumeWorkers(20, _plain)
        done: list[int] = []

        async def consume(i: int) -> None:
            done.append(i)

        for i in range(100):
            pool.submit(consume(i))
        deadline = asyncio.get_running_loop().time() + 5.0
        while (len(done) < 100 or pool.workers) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0)
        return pool.peak, pool.workers, done

    peak, workers, done = asyncio.run(body())
    assert done == list(range(100))  # in order
    assert peak == 1
    assert workers == 0  # the task ends with the queue


def test_the_pool_grows_to_its_limit_while_listeners_wait_and_never_beyond() -> None:
    async def body() -> tuple[int, int, int]:
        pool = ConsumeWorkers(5, _plain)
        release = asyncio.Event()
        running = 0
        most = 0
        finished = 0

        async def consume() -> None:
            nonlocal running, most, finished
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1
            finished += 1

        for _ in range(40):
            pool.submit(consume())
        await asyncio.sleep(0)  # the first task starts and waits in its listener
        await asyncio.sleep(0)  # the turn ended with requests queued: grown to the limit at once
        assert pool.workers == 5  # a thread-pool listener gets its concurrency in a turn, not one task per turn
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while most < 5 and loop.time() < deadline:
            await asyncio.sleep(0)
        for _ in range(20):  # more turns: it must not grow past the limit
            await asyncio.sleep(0)
        release.set()
        while finished < 40 and loop.time() < deadline:
            await asyncio.sleep(0.001)
        return most, pool.peak, finished

    most, peak, finished = asyncio.run(body())
    assert (most, peak, finished) == (5, 5, 40)


def test_a_failing_request_does_not_stop_the_ones_after_it() -> None:
    async def body() -> list[int]:
        pool = ConsumeWorkers(2, _plain)
        done: list[int] = []

        async def consume(i: int) -> None:
            if i == 1:
                raise RuntimeError("listener bug")
            done.append(i)

        for i in range(4):
            pool.submit(consume(i))
        for _ in range(10):
            await asyncio.sleep(0)
        return done

    assert asyncio.run(body()) == [0, 2, 3]


def test_stop_cancels_running_requests_and_closes_queued_ones_unrun() -> None:
    async def body() -> tuple[list[str], int]:
        pool = ConsumeWorkers(1, _plain)
        events: list[str] = []
        never = asyncio.Event()

        async def blocking() -> None:
            try:
                await never.wait()
            except asyncio.CancelledError:
                events.append("cancelled")
                raise

        async def queued() -> None:
            events.append("ran")

        pool.submit(blocking())
        for _ in range(3):
            await asyncio.sleep(0)
        pool.submit(queued())
        await pool.stop()
        pool.submit(queued())  # after stop: closed at once
        return events, pool.workers

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "coroutine ... was never awaited"
        events, workers = asyncio.run(body())
        gc.collect()
    assert events == ["cancelled"]
    assert workers == 0
