"""The consume pool of a push consumer: up to consumeThreadMax tasks taking consume
requests from one queue, as Java's consume thread pool takes them from its queue.

Why not a task per request: that is what the pool naturally becomes in asyncio, and with
Java's default of one message per request it cost more than consuming (a task, a wrapper
coroutine and the task's registration per message). Growth is lazy: a listener that
answers without waiting lets one task drain the queue within the loop turn. A loop turn
that ends with requests still queued means every task is waiting inside a listener (as
every thread of Java's pool would be busy): then tasks are added for the queued requests
at once, up to the limit, so a listener that always waits (a plain function run in the
thread pool) gets its full concurrency within a turn instead of one task per turn.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from typing import Any

Request = Coroutine[Any, Any, None]


class ConsumeWorkers:
    def __init__(self, max_workers: int, run: Callable[[Request], Coroutine[Any, Any, None]]) -> None:
        """``run(request)`` awaits one request and must not raise (it logs failures)."""
        self.max_workers = max(1, max_workers)
        self._run = run
        self._queue: collections.deque[Request] = collections.deque()
        self._workers: set[asyncio.Task[None]] = set()
        self._grow_scheduled = False
        self._stopped = False
        self.peak = 0  # most tasks at once (tests, diagnostics)

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def workers(self) -> int:
        return len(self._workers)

    def submit(self, request: Request) -> None:
        if self._stopped:
            request.close()
            return
        self._queue.append(request)
        if not self._workers:
            self._add_worker()
        if not self._grow_scheduled:
            self._grow_scheduled = True
            asyncio.get_running_loop().call_soon(self._grow)

    async def stop(self) -> None:
        """Queued requests are dropped (closed, never run); running ones are cancelled."""
        self._stopped = True
        while self._queue:
            self._queue.popleft().close()
        workers = list(self._workers)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    def _grow(self) -> None:
        self._grow_scheduled = False
        if self._stopped:
            return
        for _ in range(min(len(self._queue), self.max_workers - len(self._workers))):
            self._add_worker()

    def _add_worker(self) -> None:
        task = asyncio.get_running_loop().create_task(self._work())
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)
        self.peak = max(self.peak, len(self._workers))

    async def _work(self) -> None:
        queue = self._queue
        while queue and not self._stopped:
            await self._run(queue.popleft())
