"""One periodic background task: run a round, sleep, run again, until stopped.

Brokers and name servers keep several of these (offset persistence, client scans, broker
expiry, delayed delivery, transaction checks, ACL file watch, slave sync). Each used to
spell out its own create_task / cancel / await / log-and-go-on; this is that scaffolding
once, with the one rule every such loop must keep: a round that raises is logged and the
next round runs anyway, so a background loop never dies silently.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Interval = float | Callable[[], float]
"""Seconds between rounds, or a function asked before each sleep (a setting that may change)."""


class Periodic:
    """``Periodic(name, round_, interval, first_delay=...)``; ``start()``, ``await stop()``.

    ``round_`` may be a plain function or a coroutine function. ``first_delay`` is the sleep
    before the first round (default: one interval; 0 runs a round at once). ``on_error``
    reports a failed round (default: logged with its traceback; clients pass a rate-limited
    report, since a server that stays away fails every round). ``start`` and ``stop`` are
    idempotent; ``stop`` waits until the task has ended.
    """

    def __init__(
        self,
        name: str,
        round_: Callable[[], Awaitable[object] | object],
        interval: Interval,
        *,
        first_delay: float | None = None,
        on_error: Callable[[Periodic, Exception], object] | None = None,
    ) -> None:
        self.name = name
        self.round = round_
        self.interval = interval
        self.first_delay = first_delay
        self.on_error = on_error
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def seconds(self) -> float:
        """The current interval in seconds."""
        return self.interval() if callable(self.interval) else self.interval

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run_once(self) -> None:
        """One round, as the loop runs it (exceptions are the caller's)."""
        result = self.round()
        if inspect.isawaitable(result):
            await result

    async def _run(self) -> None:
        delay = self.seconds() if self.first_delay is None else self.first_delay
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            try:
                await self.run_once()
            except Exception:
                self.failures += 1
                log.exception(
                    "%s: round failed (failure %d); the next runs in %.1fs", self.name, self.failures, self.seconds()
                )
            await asyncio.sleep(self.seconds())
