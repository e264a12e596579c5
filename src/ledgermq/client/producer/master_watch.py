"""Watching a broker group's master from the route while sends wait on it (see
``failover`` for the why and the settings).

``MasterWatch`` holds the producer's route lookups after failures and stalls: one lookup
per topic at a time (every waiting send awaits the same one) and at most one every
``route_poll_interval`` per topic. On top of that it gives the send path two waits:

* ``watch(call, ...)``: await an attempt; once it has been in flight ``stall_after``
  seconds, look the route up again (as often as allowed) and abandon the attempt with
  ``MasterMovedError`` when the route names a different master for its broker group.
  Attempts are registered in a table, not wrapped in a task each: one monitor task
  (alive while attempts are in flight) wakes when the oldest could have stalled and
  abandons an attempt by cancelling the task awaiting it, as ``asyncio.timeout`` does. A
  task and a timer per send cost a third of the client's CPU per message;
* ``wait_for_new_master(...)``: a back-off that ends early when the route names a master
  other than the one that failed;
* ``wait_for_writable(...)``: a send that finds its topic's route without any master (the
  old one gone, the new one not yet registered) waits for one instead of failing at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ledgermq.client.errors import MasterMovedError, MQClientError
from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.clock import Clock

log = logging.getLogger("ledgermq.client.producer.producer")

T = TypeVar("T")

MIN_SLEEP = 0.005  # never spin: the shortest pause between two checks of the route


class Routes(Protocol):
    """What the watch needs of the route cache."""

    def master_addr(self, broker_name: str) -> str | None: ...

    def between_masters(self, topic: str) -> bool: ...

    async def update(self, topic: str, *, use_default: bool = False) -> bool: ...

    async def find_publish_info(self, topic: str) -> TopicPublishInfo | None: ...


@dataclass(slots=True, eq=False)
class _Attempt:
    """A send attempt in flight on ``addr`` (the master of ``broker_name`` when it began);
    ``abandon`` stops it (cancels the task awaiting it, or the future of its answer)."""

    abandon: Callable[[], Any]
    topic: str
    broker_name: str
    addr: str
    since: float
    moved_to: str | None = None
    """Set when the monitor abandons the attempt: the master the route names now."""


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
        self._attempts: dict[int, _Attempt] = {}  # in the order they began
        self._monitor: asyncio.Task[None] | None = None

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

    async def close(self) -> None:
        """Stop the monitor and route lookups (the producer is shutting down): a monitor
        sleeping toward the stall time of a send that has since finished would otherwise
        outlive the producer on its loop."""
        tasks = [t for t in (self._monitor, *self._inflight.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._monitor = None  # a monitor cancelled before it ran never reached its finally

    # -- waits -----------------------------------------------------------------------------
    def register(self, abandon: Callable[[], Any], topic: str, broker_name: str, addr: str) -> _Attempt | None:
        """Watch an attempt on ``addr`` (the master of ``broker_name``) that is not awaited
        by a task of its own: once it has waited ``stall_after`` and the route names
        another master, ``abandon`` is called and the attempt's ``moved_to`` is set (see
        ``moved_error``). None when watching is off. ``unregister`` when it ends."""
        if not self.settings.enabled:
            return None
        attempt = _Attempt(abandon, topic, broker_name, addr, self.clock.monotonic())
        self._attempts[id(attempt)] = attempt
        if self._monitor is None:
            self._monitor = asyncio.create_task(self._watch_stalls(), name="producer-master-watch")
        return attempt

    def unregister(self, attempt: _Attempt) -> None:
        self._attempts.pop(id(attempt), None)

    def moved_error(self, attempt: _Attempt) -> MasterMovedError:
        """The error of an attempt the monitor abandoned (``moved_to`` set)."""
        self.abandoned += 1
        return MasterMovedError(
            f"no answer from {attempt.addr} for {self.settings.stall_after:.1f}s or more and the route now "
            f"names {attempt.moved_to} as the master of {attempt.broker_name}: attempt abandoned "
            "(it may have been stored)",
            attempt.addr,
            attempt.moved_to or "",
        )

    async def watch(self, call: Awaitable[T], topic: str, broker_name: str, addr: str) -> T:
        """Await ``call`` (an attempt on ``addr``, the master of ``broker_name``) in the
        calling task; abandon it with ``MasterMovedError`` once it has waited ``stall_after``
        seconds and the route names another master. An answer that arrived before the
        monitor decided is never abandoned (one arriving in that very loop turn may be: its
        message is then sent again, a duplicate as any abandoned attempt may make)."""
        task = asyncio.current_task() if self.settings.enabled else None
        if task is None:
            return await call
        attempt = self.register(task.cancel, topic, broker_name, addr)
        assert attempt is not None
        try:
            return await call
        except asyncio.CancelledError:
            if attempt.moved_to is not None and task.uncancel() == 0:
                raise self.moved_error(attempt) from None
            raise
        finally:
            self.unregister(attempt)

    async def _watch_stalls(self) -> None:
        """The monitor: sleeps until the oldest attempt could have stalled; then looks the
        routes of stalled attempts up (as often as allowed) and abandons those whose broker
        group has another master now. Ends when no attempt is in flight."""
        stall_after = self.settings.stall_after
        try:
            while True:
                waiting = [a for a in self._attempts.values() if a.moved_to is None]
                if not waiting:
                    return
                now = self.clock.monotonic()
                stalled = [a for a in waiting if now - a.since >= stall_after]
                if not stalled:
                    await asyncio.sleep(max(MIN_SLEEP, waiting[0].since + stall_after - now))
                    continue
                topics = {a.topic for a in stalled}
                for topic in topics:
                    await self.refresh(topic)
                for a in stalled:
                    if a.moved_to is None and id(a) in self._attempts:
                        new = self.moved(a.broker_name, a.addr)
                        if new is not None:
                            a.moved_to = new
                            a.abandon()
                await asyncio.sleep(max(MIN_SLEEP, min(self._until_next_lookup(t) for t in topics)))
        except asyncio.CancelledError:
            raise
        except Exception:  # stalled sends still end at their own timeout
            log.exception("the producer's master watch failed; stalled sends wait out their timeout")
        finally:
            self._monitor = None

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
