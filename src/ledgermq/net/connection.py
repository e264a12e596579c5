"""One remoting connection over asyncio, shared by the server and the client side.

A connection is an ``asyncio.Protocol``: bytes go through ``FrameDecoder``; responses
resolve the matching pending request (by opaque); requests go to ``on_request``.
Both sides can send requests (brokers call back into clients), so each connection has
its own opaque counter and pending table, and closing fails every pending request.

Writes are coalesced: ``send`` queues the encoded frame and the first send of a loop
turn schedules one flush for the next, so the answers (or requests) produced in one turn
leave in one write instead of one system call each. Answers given while a read's frames
are handled leave together at the end of that read, before the work those requests
scheduled for later in the turn (the store's dispatch, replication to a slave): the
sender is answered first, in one write per read. A flush happens before ``close``, so
nothing sent before a close is dropped by it.

Backpressure: when the peer stops reading and our write buffer passes the high-water
mark, the connection stops reading from that peer (no new work from it) until the
buffer drains; past ``max_write_buffer`` it is closed rather than allowed to eat memory.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, cast

from ledgermq.errors import LedgerError, RemoteProtocolError
from ledgermq.protocol.codes import RESPONSE_FLAG
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, BadFrame, FrameDecoder

log = logging.getLogger(__name__)

_FLUSH_AT = 256 * 1024
"""Queued bytes that are written at once instead of at the end of the loop turn."""


class ConnectionClosedError(LedgerError):
    """The connection closed before the request got its answer."""


class RequestTimeoutError(LedgerError):
    """No answer within the request's timeout."""


RequestHandler = Callable[["Connection", RemotingCommand], None]
BadFrameHandler = Callable[["Connection", BadFrame], None]


class Connection(asyncio.Protocol):
    def __init__(
        self,
        on_request: RequestHandler | None = None,
        on_bad_frame: BadFrameHandler | None = None,
        on_close: Callable[[Connection], None] | None = None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_write_buffer: int = 64 * 1024 * 1024,
    ) -> None:
        self.decoder = FrameDecoder(max_frame_size)
        self.on_request = on_request
        self.on_bad_frame = on_bad_frame
        self.on_close = on_close
        self.max_write_buffer = max_write_buffer
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = itertools.count(1)
        self.closed = asyncio.Event()
        self.inflight = 0  # requests from the peer still being processed
        self.last_active = 0.0
        self.attachment: dict[str, Any] = {}  # per-connection state owned by the application
        self._writing_paused = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._reading = False  # in data_received: its end flushes what its frames answered
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_active = self._loop.time()
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024)

    def data_received(self, data: bytes) -> None:
        # the loop of connection_made: Python 3.11's get_running_loop() costs a getpid() call
        loop = self._loop
        self.last_active = loop.time() if loop is not None else 0.0
        try:
            frames = self.decoder.feed(data)
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            self.close()
            return
        self._reading = True
        try:
            for frame in frames:
                if not self.is_open:
                    return  # closed by an earlier frame of this read: the rest must not run
                if isinstance(frame, BadFrame):
                    if self.on_bad_frame is not None:
                        self.on_bad_frame(self, frame)
                    else:
                        log.warning("closing %s: malformed frame: %s", self.peer, frame.reason)
                        self.close()
                        return
                elif frame.flag & RESPONSE_FLAG:
                    fut = self.pending.pop(frame.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
                elif self.on_request is not None:
                    self.on_request(self, frame)
        finally:
            self._reading = False
            if self._out and not self._flush_scheduled:
                self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._out = []
        self._out_bytes = 0
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosedError(f"connection to {self.peer} closed"))
        self.pending.clear()
        self.closed.set()
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        if self.transport is not None:
            if self.transport.get_write_buffer_size() > self.max_write_buffer:
                log.warning("closing %s: it does not read its responses", self.peer)
                self.close()
                return
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self.transport is not None:
            self.transport.resume_reading()

    # -- sending ---------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        if not self.is_open:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        frame = cmd.encode()
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._out_bytes >= _FLUSH_AT:
            self.flush()  # big answers go at once, so the write-buffer bound holds as before
        elif not self._flush_scheduled and not self._reading:
            self._flush_scheduled = True
            loop = self._loop if self._loop is not None else asyncio.get_running_loop()
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what ``send`` queued, in one call (asyncio joins it, uvloop writes it with writev)."""
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        transport = self.transport
        if not out or transport is None or transport.is_closing():
            return
        if len(out) == 1:
            transport.write(out[0])
        else:
            transport.writelines(out)
        if transport.get_write_buffer_size() > self.max_write_buffer:
            log.warning("closing %s: write buffer over %d bytes", self.peer, self.max_write_buffer)
            self.close()

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and await its response (matched by a fresh opaque)."""
        cmd.opaque = next(self._opaque) & 0x7FFFFFFF
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        try:
            self.send(cmd)
            # asyncio.timeout, not wait_for: in 3.11 wait_for returns an answer that arrives
            # with the caller's cancel and drops the cancel (a shutdown then waits forever)
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise RequestTimeoutError(f"no answer from {self.peer} within {timeout:.1f}s") from None
        finally:
            self.pending.pop(cmd.opaque, None)

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next(self._opaque) & 0x7FFFFFFF
        cmd.flag |= 0x2
        self.send(cmd)

    def close(self) -> None:
        """Close; a peer that left output unread is cut off at once (abort), since a plain
        close would wait for it to read and keep the buffer, and the socket, forever."""
        transport = self.transport
        if transport is None:
            return
        if self._out and not transport.is_closing():
            self.flush()  # what was sent before the close still leaves
            transport = self.transport
            if transport is None or transport.is_closing():
                return
        if transport.get_write_buffer_size() > 0:
            transport.abort()
        else:
            transport.close()
