"""An asyncio event loop on virtual time, for tests of timeouts, back-offs and polling.

``loop.time()`` starts at 0 and only moves when the loop would otherwise wait for its next
timer: then it jumps straight to that timer instead of sleeping. A test of "gives up after
0.3 s" or "looks the route up at most every 20 ms" then runs in microseconds, and the
times it observes are exact functions of the code under test, however loaded the machine
is. ``LoopClock`` gives code that takes a ``ledgermq.clock.Clock`` the same time.

Use it only where everything the test waits for happens on the loop (stubs, futures,
tasks, or servers and clients of the test's own loop talking over loopback sockets). Work
in other threads or processes takes real time the virtual clock does not see: a timer
pending meanwhile would fire at once. I/O the loop is already able to do is still done
before time jumps (the selector is polled without blocking first); with ``io_grace`` the
loop also waits that long for real before each jump while it watches sockets, so bytes
one of its own sockets just wrote to another have surely arrived (loopback delivers them
within the writing call as a rule; the grace covers the exception).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; with nothing ready, advances the loop's clock by the wait
    the loop asked for (None: no timer is pending, so block on real I/O)."""

    def __init__(self, io_grace: float) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None
        self.io_grace = io_grace

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            return super().select(None)
        if self.io_grace > 0 and len(self.get_map()) > 1:  # sockets besides the loop's own wake-up pipe
            ready = super().select(self.io_grace)
            if ready:
                return ready
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``asyncio.SelectorEventLoop`` whose ``time()`` is virtual (see the module's docstring)."""

    def __init__(self, io_grace: float = 0.0) -> None:
        selector = _JumpingSelector(io_grace)
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


class LoopClock:
    """A ``ledgermq.clock.Clock`` that reads the running loop's (virtual) time."""

    def __init__(self, wall_ms_at_zero: int = 1_700_000_000_000) -> None:
        self.wall_ms_at_zero = wall_ms_at_zero

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        return self.wall_ms_at_zero + int(self.monotonic() * 1000)


def now() -> float:
    """The running loop's time: virtual seconds since the loop began."""
    return asyncio.get_running_loop().time()


def run_virtual(main: Awaitable[T], *, io_grace: float = 0.0) -> T:
    """``asyncio.run`` on a ``VirtualTimeLoop`` (``io_grace``: see the module's docstring)."""

    async def wrapper() -> T:
        return await main

    with asyncio.Runner(loop_factory=lambda: VirtualTimeLoop(io_grace)) as runner:
        return runner.run(wrapper())
