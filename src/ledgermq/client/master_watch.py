"""Watching a broker group's master from the route while sends wait on it (see
``failover`` for the why and the settings).

``MasterWatch`` holds the producer's route lookups after failures and stalls: one lookup
per topic at a time (every waiting send awaits the same one) and at most one every
``route_poll_interval`` per topic. On top of that it gives the send path two waits:

* ``watch(call, ...)``: await an attempt; once it has been in flight ``stall_after``
  seconds, look the route up again (as often as allowed) and abandon the attempt with
  ``MasterMovedError`` when the route names a different master for its broker group;
* ``wait_for_new_master(...)``: a back-off that ends early when the route names a master
  other than the one that failed;
* ``wait_for_writable(...)``: a send that finds its topic's route without any master (the
  old one gone, the new one not yet registered) waits for one instead of failing at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Protocol, TypeVar

from ledgermq.client.errors import MasterMovedError, MQClientError
from ledgermq.client.failover import FailoverSettings
from ledgermq.client.publish_info import TopicPublishInfo
from ledgermq.clock import Clock

log = logging.getLogger("ledgermq.client.producer")

T = TypeVar("T")

MIN_SLEEP = 0.005  # never spin: the shortest pause between two checks of the route


class Routes(Protocol):
    """What the watch needs of the route cache."""

    def master_addr(self, broker_name: str) -> str | None: ...

    def between_masters(self, topic: str) -> bool: ...

    async def update(self, topic: str, *, use_default: bool = False) -> bool: ...

    async def find_publish_info(self, topic: str) -> TopicPublishInfo | None: ...


class MasterWatch:
    """Shared, rate-bounded route lookups and the two waits built on them."""

    def __init__(self, routes: Routes, settings: FailoverSettings, clock: Clock, min_interval: float) -> None:
        self.routes = routes
        self.settings = settings
        self.clock = clock
        self.min_interval = min_interval
        self.lookups = 0  # name server lookups made (tests and logs)
        self.abandoned = 0  # attempts given up for a new master (each may have been stored)
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._last: dict[str, float] = {}

    # -- lookups ---------------------------------------------------------------------------
    async def refresh(self, topic: str) -> None:
        """Look the topic's route up unless one lookup is under way (then wait for it) or one
        began less than ``min_interval`` ago (then return at once). Failures are logged:
        the cached route stays."""
        task = self._inflight.get(topic)
        if task is None:
            now = self.clock.monotonic()
            if now - self._last.get(topic, float("-inf")) < self.min_interval:
                return
            self._last[topic] = now
            task = asyncio.create_task(self._lookup(topic), name=f"route-refresh-{topic}")
            self._inflight[topic] = task
        # shielded: a send that gives up waiting must not cancel the lookup others await
        await asyncio.shield(task)

    async def _lookup(self, topic: str) -> None:
        try:
            self.lookups += 1
            await self.routes.update(topic)
        except MQClientError as exc:
            log.debug("route refresh of %s after a failed or stalled send did not work: %s", topic, exc)
        except Exception:  # shared by every waiting send: none of them should get its bug
            log.exception("route refresh of %s failed", topic)
        finally:
            self._inflight.pop(topic, None)

    def _until_next_lookup(self, topic: str) -> float:
        return self._last.get(topic, float("-inf")) + self.min_interval - self.clock.monotonic()

    async def publish_info(self, topic: str) -> TopicPublishInfo | None:
        """A fresher route after a failed attempt (rate-bounded as ``refresh``)."""
        await self.refresh(topic)
        return await self.routes.find_publish_info(topic)

    def moved(self, broker_name: str, addr: str) -> str | None:
        """The master the route names for ``broker_name`` if it is not ``addr``."""
        now = self.routes.master_addr(broker_name)
        return now if now is not None and now != addr else None

    # -- waits -----------------------------------------------------------------------------
    async def watch(self, call: Awaitable[T], topic: str, broker_name: str, addr: str) -> T:
        """Await ``call`` (an attempt on ``addr``, the master of ``broker_name``); abandon it
        with ``MasterMovedError`` once it has waited ``stall_after`` seconds and the route
        names another master. An answer that has arrived is never abandoned."""
        if not self.settings.enabled:
            return await call
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.settings.stall_after)
            while not done:
                await self.refresh(topic)
                if task.done():
                    break
                new = self.moved(broker_name, addr)
                if new is not None:
                    self.abandoned += 1
                    raise MasterMovedError(
                        f"no answer from {addr} for {self.settings.stall_after:.1f}s or more and the route now "
                        f"names {new} as the master of {broker_name}: attempt abandoned (it may have been stored)",
                        addr,
                        new,
                    )
                pause = max(MIN_SLEEP, self._until_next_lookup(topic))
                done, _ = await asyncio.wait({task}, timeout=pause)
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                task.add_done_callback(_consume)

    async def wait_for_new_master(self, topic: str, broker_name: str, addr: str, delay: float) -> None:
        """Wait up to ``delay`` seconds, looking the route up as often as allowed, and return
        as soon as it names a master other than ``addr`` for ``broker_name``."""
        end = self.clock.monotonic() + delay
        while True:
            await self.refresh(topic)
            left = end - self.clock.monotonic()
            if self.moved(broker_name, addr) is not None or left <= 0:
                return
            await asyncio.sleep(max(MIN_SLEEP, min(left, self._until_next_lookup(topic))))

    async def wait_for_writable(self, topic: str, delay: float) -> None:
        """Wait up to ``delay`` seconds, looking the route up as often as allowed, while the
        topic's route names no master to write to."""
        end = self.clock.monotonic() + delay
        while True:
            await self.refresh(topic)
            left = end - self.clock.monotonic()
            if not self.routes.between_masters(topic) or left <= 0:
                return
            await asyncio.sleep(max(MIN_SLEEP, min(left, self._until_next_lookup(topic))))


def _consume(task: asyncio.Task[object]) -> None:
    """Retrieve an abandoned attempt's outcome so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
