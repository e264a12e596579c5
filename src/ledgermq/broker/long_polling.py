"""Long polling: pulls that found nothing wait for new messages instead of spinning.

A PULL_MESSAGE with the SUSPEND flag that finds no new message parks here until either a
message arrives on its queue (the store's reput thread reports arrivals; they are
handed to the event loop thread-safely) or its suspend timeout passes; then the pull is
run once more without suspending and answered (RocketMQ ``PullRequestHoldService``).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class PullHoldService:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Wait until the queue grows beyond ``offset``; False on timeout."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        entry = (offset, fut)
        self._waiters.setdefault(key, []).append(entry)
        try:
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
        """The store's arrival listener: called from the reput thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.arrived, topic, queue_id, max_offset)
            except RuntimeError:
                pass  # the loop is shutting down
