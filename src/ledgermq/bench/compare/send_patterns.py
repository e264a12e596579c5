"""The ways users send, as the compare bench drives them: each function sends ``count``
messages one way and fills ``latencies`` (ms, one per message); a batch's round trip
counts once per message it carried.

The same patterns run against ledgermq (``Producer``, ``SyncProducer``) and JetStream
(nats-py: ``js.publish``), so a pattern's row compares like with like:

* ``senders``: that many tasks, each awaiting its send before the next (sync send = 1);
* ``fired``: every send started in a loop, then one gather (``send_async``; JetStream:
  one publish coroutine per message, gathered);
* ``paced``: start a send only when the in-flight budget has room
  (``wait_for_async_capacity``; JetStream: a semaphore of ``inflight``);
* the blocking facade (``SyncProducer.send`` from one thread, and ``fired_from_thread``:
  its ``send_async`` in a loop from one thread): ledgermq only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any

Send = Callable[[], Awaitable[Any]]


async def senders(send: Send, count: int, tasks: int, cap_s: float, latencies: list[float]) -> int:
    """``tasks`` tasks, each awaiting its send before the next: that many in flight."""
    clock = time.perf_counter
    deadline = clock() + cap_s
    remaining = count

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0 and clock() < deadline:
            remaining -= 1
            t0 = clock()
            await send()
            latencies.append((clock() - t0) * 1000)

    await asyncio.gather(*(sender() for _ in range(tasks)))
    return len(latencies)


def _record(latencies: list[float], t0: float, clock: Callable[[], float]) -> Callable[[object], None]:
    return lambda _f: latencies.append((clock() - t0) * 1000)


async def fired(start: Callable[[], asyncio.Future[Any]], count: int, latencies: list[float]) -> int:
    """Every send started at once in a loop, then all awaited (``send_async`` + gather)."""
    clock = time.perf_counter
    futures = []
    for _ in range(count):
        fut = start()
        fut.add_done_callback(_record(latencies, clock(), clock))
        futures.append(fut)
    await asyncio.gather(*futures)
    return count


async def paced(
    start: Callable[[], asyncio.Future[Any]],
    wait_for_room: Callable[[], Awaitable[Any]],
    count: int,
    latencies: list[float],
) -> int:
    """A send started whenever the in-flight budget has room (``wait_for_async_capacity``)."""
    clock = time.perf_counter
    futures = []
    for _ in range(count):
        await wait_for_room()
        fut = start()
        fut.add_done_callback(_record(latencies, clock(), clock))
        futures.append(fut)
    await asyncio.gather(*futures)
    return count


def blocking(send: Callable[[], object], count: int, cap_s: float, latencies: list[float]) -> int:
    """One thread calling a blocking send in a loop (the blocking facade)."""
    clock = time.perf_counter
    deadline = clock() + cap_s
    done = 0
    while done < count and clock() < deadline:
        t0 = clock()
        send()
        latencies.append((clock() - t0) * 1000)
        done += 1
    return done


def fired_from_thread(
    start: Callable[[], concurrent.futures.Future[Any]], count: int, cap_s: float, latencies: list[float]
) -> int:
    """One thread starting sends in a loop (the blocking facade's ``send_async``, which
    blocks only while the in-flight budget is full), then waiting for all of them."""
    clock = time.perf_counter
    deadline = clock() + cap_s
    futures: list[concurrent.futures.Future[Any]] = []
    while len(futures) < count and clock() < deadline:
        fut = start()
        fut.add_done_callback(_record(latencies, clock(), clock))
        futures.append(fut)
    for fut in concurrent.futures.as_completed(futures, timeout=max(deadline - clock(), 0.0) + cap_s):
        fut.result()
    return len(futures)


class Paced:
    """JetStream's ``paced``: a semaphore of ``inflight`` publishes, one task each."""

    def __init__(self, inflight: int) -> None:
        self.room = asyncio.Semaphore(inflight)

    def start(self, publish: Send) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(publish())
        task.add_done_callback(lambda _t: self.room.release())
        return task

    async def wait_for_room(self) -> None:
        await self.room.acquire()
