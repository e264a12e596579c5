"""The slave's wait for the master's socket to become readable, on the event loop's own
timers (a wait's timeout comes from the caller's deadlines on its injected clock; turning it
into a loop timer needs the loop's time, which the loop's timers run on)."""

from __future__ import annotations

import asyncio
import socket


class Readiness:
    """Whether the master's socket has bytes for us, with one reader registration that
    stays while the client waits and reads.

    Why: registering a reader for each wait and removing it after (as ``loop.sock_recv``
    does) costs two epoll_ctl calls per wait, and a read that finds nothing one more; with
    one message per wait (a single sender) that was most of a slave's system calls. A read
    shorter than asked says the socket is drained, so ``readable`` drops without a read
    that fails. Bytes that arrive while the client is busy elsewhere (not waiting) unhook
    the reader until the next wait: level-triggered readiness would otherwise call back
    on every turn of the loop until they are read."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.fd = sock.fileno()
        self.readable = True  # a fresh connection may already hold bytes: look once
        self._waiter: asyncio.Future[None] | None = None
        self._hooked = False
        # Kept across waits and moved only when a wait needs an earlier deadline: one
        # message per wait would otherwise create and cancel a timer each. A timer that
        # fires early only wakes the client to plan again.
        self._timer: asyncio.TimerHandle | None = None

    def _on_readable(self) -> None:
        self.readable = True
        waiter = self._waiter
        if waiter is None:  # busy elsewhere: the next read finds the bytes
            self.loop.remove_reader(self.fd)
            self._hooked = False
        elif not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until the socket is readable or ``timeout`` seconds passed (the caller's deadlines)."""
        if self.readable:
            return
        if not self._hooked:
            self.loop.add_reader(self.fd, self._on_readable)
            self._hooked = True
        loop = self.loop
        waiter = self._waiter = loop.create_future()
        when = loop.time() + timeout
        timer = self._timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(when, self._on_timer)
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def interrupt(self) -> None:
        """Wake a waiting client now (it has something to do besides reading)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._hooked:
            self.loop.remove_reader(self.fd)
            self._hooked = False
