"""Long polling: pulls that found nothing wait for new messages instead of spinning.

A PULL_MESSAGE with the SUSPEND flag that finds no new message parks here until either a
message arrives on its queue (the store's reput thread reports arrivals; they are
handed to the event loop thread-safely) or its suspend timeout passes (RocketMQ
``PullRequestHoldService``). ``hold`` resumes the pull through the one ``read`` its
processor gives: each wake-up reads the store once, and that read is the answer, unless
the filter matched nothing of what arrived while time remains (then the pull waits on,
past those messages, as RocketMQ's hold service checks each arrival against the filter).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from ledgermq.clock import Clock
from ledgermq.store.results import GetResult, GetStatus

log = logging.getLogger(__name__)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class PullHoldService:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Arrivals reported by the reput thread, waiting for the loop: one hand-off (a wake-up
        # of the loop) per batch instead of one per queue per dispatch round.
        self._arrivals: dict[tuple[str, int], int] = {}
        self._arrivals_lock = threading.Lock()
        self._drain_scheduled = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout: float,
        *,
        read: Callable[[int], tuple[int, GetResult]],
        current_max: Callable[[], int],
        clock: Clock,
    ) -> tuple[int, GetResult]:
        """Hold a pull that found nothing at ``offset`` until its answer is ready; returns
        the offset last read and what ``read`` found there (``read`` says which offset it
        read: it may go back to the pull's own when its subscription changed).

        A wake-up whose read matched nothing moves the offset past the messages scanned and
        waits again for the time left; at the timeout the queue is read once more (it may
        have grown without a wake-up reaching this pull), and that is the answer."""
        deadline = clock.monotonic() + timeout
        while True:
            arrived = await self.wait(
                topic, queue_id, offset, max(0.0, deadline - clock.monotonic()), current_max=current_max
            )
            offset, result = read(offset)
            moved = result.next_begin_offset > offset  # else waiting on would spin
            if not arrived or result.status is not GetStatus.NO_MATCHED_MESSAGE or not moved:
                return offset, result
            if clock.monotonic() >= deadline:
                return offset, result
            offset = result.next_begin_offset

    async def wait(
        self, topic: str, queue_id: int, offset: int, timeout: float, *, current_max: Callable[[], int] | None = None
    ) -> bool:
        """Wait until the queue grows beyond ``offset``; False on timeout.

        ``current_max`` reads the queue's max offset now. It is asked once the waiter is
        registered, which closes the gap between the caller's read and the registration:
        the reput thread skips queues nobody waits on, so an arrival in that gap is seen
        here or it sees this waiter.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        entry = (offset, fut)
        self._waiters.setdefault(key, []).append(entry)
        try:
            if current_max is not None and current_max() > offset:
                return True
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    self._waiters.pop(key, None)

    def arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Wake waiters of the queue whose offset is now below its max (event-loop thread)."""
        waiters = self._waiters.get((topic, queue_id))
        if not waiters:
            return
        for offset, fut in list(waiters):
            if max_offset > offset and not fut.done():
                fut.set_result(None)

    def arrived_threadsafe(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener: called from the reput thread, or from the loop's
        own thread when a put dispatched its record itself (then the waiters wake at once).

        Arrivals gather until the loop takes them; only the first of a batch schedules the
        loop's turn, so a busy store does not wake the loop once per queue per round. None is
        lost: an arrival either joins a drain that is still to run or schedules a new one.
        """
        loop = self._loop
        key = (topic, queue_id)
        if loop is None or key not in self._waiters or loop.is_closed():
            return  # nobody waits (a pull registering now re-reads the queue: see ``wait``)
        if _running_loop() is loop:  # dispatched by the put itself, on the loop's thread
            self.arrived(topic, queue_id, max_offset)
            return
        with self._arrivals_lock:
            if self._arrivals.get(key, -1) < max_offset:
                self._arrivals[key] = max_offset
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            loop.call_soon_threadsafe(self._drain_arrivals)
        except RuntimeError:
            pass  # the loop is shutting down

    def _drain_arrivals(self) -> None:
        with self._arrivals_lock:
            arrivals, self._arrivals = self._arrivals, {}
            self._drain_scheduled = False
        for (topic, queue_id), max_offset in arrivals.items():
            self.arrived(topic, queue_id, max_offset)
