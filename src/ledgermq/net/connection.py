"""One remoting connection over asyncio, shared by the server and the client side.

A connection is an ``asyncio.Protocol``: bytes go through ``FrameDecoder``; responses
resolve the matching pending request (by opaque); requests go to ``on_request``.
Both sides can send requests (brokers call back into clients), so each connection has
its own opaque counter and pending table, and closing fails every pending request.

Writes are coalesced: ``send`` queues the encoded frame; during a read, or the broker's
end-of-turn step (the connection's ``ReadRound``, net/read_round.py, shared by all of a
server's connections), the queued frames leave when it ends, and outside one the first
send schedules one flush for the next loop pass, so the answers (or requests) produced
together leave in one write instead of one system call each. A plain transport gets the frames as
they are (``writelines``: one ``writev``, no copy); a TLS transport gets them joined into
one buffer, because it encrypts each buffer it is given into records of its own: 256 small
answers written apart are 256 TLS records (a cipher call and a header each, and one
``SSLObject.read`` each at the peer), joined they are a few 16 KiB records. Answers given while a read's frames
are handled leave together at the end of that read, before the work those requests
scheduled for later in the turn (the broker's dispatch, replication to a slave): the
sender is answered first, in one write per read. A flush happens before ``close``, so
nothing sent before a close is dropped by it.

Timeouts: each request has its own deadline, but a connection has one timer, armed at
the earliest deadline of its pending requests (a heap of them), instead of a timer and a
timeout context per request. When it fires, every request past its deadline fails with
``RequestTimeoutError`` and the timer is armed again at the next deadline; entries of
requests that ended otherwise (answered, cancelled) are dropped as they reach the top of
the heap, and the heap is compacted when they outnumber the live ones. Sending at a
steady rate with one timeout, deadlines arrive in order, so the timer is rarely re-armed.

Backpressure: when the peer stops reading and our write buffer passes the high-water
mark, the connection stops reading from that peer (no new work from it) until the
buffer drains; past ``max_write_buffer`` it is closed rather than allowed to eat memory.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

from ledgermq.errors import LedgerError, RemoteProtocolError
from ledgermq.net.read_round import ReadRound
from ledgermq.protocol.codes import RESPONSE_FLAG
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, BadFrame, FrameDecoder

log = logging.getLogger(__name__)

_FLUSH_AT = 256 * 1024
"""Queued bytes that are written at once instead of at the end of the loop turn."""

_TIMER_SLACK = 0.001
"""A deadline this close counts as reached when the timer fires: uvloop's timers have
millisecond resolution and fire up to half a millisecond early (``asyncio.timeout``,
which the deadline timer replaces, timed out then too); re-arming for the rest would
spin the loop until it passed."""


class ConnectionClosedError(LedgerError):
    """The connection closed before the request got its answer."""


class RequestTimeoutError(LedgerError):
    """No answer within the request's timeout."""


_Deadline = list[Any]
"""A pending request's deadline: [loop time, sequence number (unique: ties never compare
further), opaque, future, its timeout in seconds (for the error message)]. The request
sets the future to None when it ends, so an entry left in the heap does not keep the
answer (a pull's body can be megabytes) alive."""
_FUT = 3

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
        read_round: ReadRound | None = None,
    ) -> None:
        self.decoder = FrameDecoder(max_frame_size)
        self.on_request = on_request
        self.on_bad_frame = on_bad_frame
        self.on_close = on_close
        self.max_write_buffer = max_write_buffer
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.pending: dict[int, asyncio.Future[RemotingCommand] | PendingCall] = {}
        self._opaque = itertools.count(1)
        self.closed = asyncio.Event()
        self.inflight = 0  # requests from the peer still being processed
        self.last_active = 0.0
        self.attachment: dict[str, Any] = {}  # per-connection state owned by the application
        self._writing_paused = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._join_writes = False  # a TLS transport: one buffer per flush, so few and full records
        self._round = read_round if read_round is not None else ReadRound()  # a server's is shared
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadlines: list[_Deadline] = []  # a heap; entries of ended requests (no future) linger until popped
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._waiting = 0  # requests with a deadline entry whose await has not ended

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_active = self._loop.time()
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        self._join_writes = transport.get_extra_info("ssl_object") is not None

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
        read_round = self._round
        read_round.depth += 1  # ``ReadRound.enter``; here and below properties spelled out (per frame)
        try:
            for frame in frames:
                transport = self.transport
                if transport is None or transport.is_closing():
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
            read_round.exit()  # writes what the frames answered

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._out = []
        self._out_bytes = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadlines = []
        for fut in list(self.pending.values()):  # a PendingCall leaves the table as it fails
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
        transport = self.transport
        if transport is None or transport.is_closing():  # ``is_open``, once per answer
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        frame = cmd.encode()
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._out_bytes >= _FLUSH_AT:
            self.flush()  # big answers go at once, so the write-buffer bound holds as before
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            if self._round.depth:
                self._round.defer_flush(self)  # leaves when the read (or step) ends
            else:
                loop = self._loop if self._loop is not None else asyncio.get_running_loop()
                loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what ``send`` queued, in one call (plain: uvloop writes it with writev; TLS:
        joined first, see the module's docstring)."""
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        transport = self.transport
        if not out or transport is None or transport.is_closing():
            return
        if len(out) == 1:
            transport.write(out[0])
        elif self._join_writes:
            transport.write(b"".join(out))
        else:
            transport.writelines(out)
        if transport.get_write_buffer_size() > self.max_write_buffer:
            log.warning("closing %s: write buffer over %d bytes", self.peer, self.max_write_buffer)
            self.close()

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and await its response (matched by a fresh opaque); after
        ``timeout`` seconds it fails with ``RequestTimeoutError`` and a late answer is dropped.

        A plain await of the future, no ``asyncio.timeout`` or ``wait_for``: the deadline
        timer fails the future, and a cancel of the caller cancels the future. So an
        answer arriving in the same loop turn as the caller's cancel does not swallow
        the cancel (3.11's ``wait_for`` returns the answer and drops the cancel, and a
        shutdown then waits forever)."""
        seq = next(self._opaque)
        opaque = cmd.opaque = seq & 0x7FFFFFFF
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self.pending[opaque] = fut
        entry: _Deadline | None = None
        try:
            self.send(cmd)
            deadline = loop.time() + timeout
            entry = [deadline, seq, opaque, fut, timeout]
            heapq.heappush(self._deadlines, entry)
            self._waiting += 1
            if self._timer is None or deadline < self._timer_at:
                self._arm(loop, deadline)
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: a cancel may have beaten the timeout to the caller
            del fut  # the exception's traceback holds this frame: no cycle back through the future
            raise
        finally:
            self.pending.pop(opaque, None)
            if entry is not None:
                entry[_FUT] = None  # ended: the heap no longer holds the future or its answer
                self._waiting -= 1
                self._drop_ended()

    def start_request(
        self, cmd: RemotingCommand, timeout: float, on_done: Callable[[PendingCall], None]
    ) -> PendingCall:
        """``request`` without a coroutine or future: send now; ``on_done`` is called with
        the returned ``PendingCall`` when the answer is read (from the read itself, with no
        extra loop step), the deadline passes, the connection closes or the call is
        cancelled. For a caller that handles answers in callbacks (the producer's send
        path) and would otherwise need a task and a future per request. Same deadline,
        errors and late-answer handling as ``request``. ``ConnectionClosedError`` is raised
        here when the connection is closed."""
        seq = next(self._opaque)
        opaque = cmd.opaque = seq & 0x7FFFFFFF
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        self.send(cmd)
        call = PendingCall(self, opaque, on_done)
        self.pending[opaque] = call
        deadline = loop.time() + timeout
        call.entry = [deadline, seq, opaque, call, timeout]
        heapq.heappush(self._deadlines, call.entry)
        self._waiting += 1
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)
        return call

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._on_deadline)
        self._timer_at = when

    def _drop_ended(self) -> None:
        """Forget the deadlines of requests that ended: those on top at once, the rest by
        compaction once they outnumber the waiting ones (so the heap stays about as long
        as the number of requests awaited, whatever order the answers come in). Counted
        by awaits, not by the pending table: a read of many answers empties the table at
        once, before any of their awaits has ended and marked its entry."""
        heap = self._deadlines
        while heap and heap[0][_FUT] is None:
            heapq.heappop(heap)
        if len(heap) > 2 * self._waiting + 64:
            heap[:] = [entry for entry in heap if entry[_FUT] is not None]
            heapq.heapify(heap)

    def _on_deadline(self) -> None:
        """Fail the requests past their deadline; arm again at the next deadline, if any
        (with nothing pending the timer stays off)."""
        self._timer = None
        loop = self._loop
        if loop is None:
            return
        reached = loop.time() + _TIMER_SLACK
        heap = self._deadlines
        while heap:
            deadline, _seq, opaque, fut, timeout = heap[0]
            if fut is not None and not fut.done() and deadline > reached:
                self._arm(loop, deadline)
                return
            heapq.heappop(heap)  # before failing it: a PendingCall's callback may push a new request
            if fut is not None and not fut.done():
                self.pending.pop(opaque, None)
                fut.set_exception(RequestTimeoutError(f"no answer from {self.peer} within {timeout:.1f}s"))

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next(self._opaque) & 0x7FFFFFFF
        cmd.flag |= 0x2
        self.send(cmd)

    def oneway_now(self, cmds: Iterable[RemotingCommand]) -> None:
        """``oneway`` each of ``cmds`` and write them at once, with whatever was queued before
        them, in one call: for a sender that is done for now (a Raft Ready's messages to one
        peer leave while its node writes the same entries), no flush left for a later turn."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        out = self._out
        for cmd in cmds:
            cmd.opaque = next(self._opaque) & 0x7FFFFFFF
            cmd.flag |= 0x2
            out.append(cmd.encode())
        self.flush()

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


class PendingCall:
    """A request of ``Connection.start_request``: what the pending table and the deadline
    heap hold in place of a future (the same ``done``/``set_result``/``set_exception``), and
    what its ``on_done`` reads (``cancelled``, ``exception``, ``result``)."""

    __slots__ = ("_exc", "_result", "_state", "conn", "entry", "on_done", "opaque")

    def __init__(self, conn: Connection, opaque: int, on_done: Callable[[PendingCall], None]) -> None:
        self.conn, self.opaque, self.on_done = conn, opaque, on_done
        self.entry: _Deadline | None = None
        self._state = 0  # 0 waiting, 1 answered, 2 failed, 3 cancelled
        self._result: RemotingCommand | None = None
        self._exc: BaseException | None = None

    def done(self) -> bool:
        return self._state != 0

    def cancelled(self) -> bool:
        return self._state == 3

    def result(self) -> RemotingCommand:
        assert self._result is not None, "the call has no answer"
        return self._result

    def exception(self) -> BaseException | None:
        return self._exc

    def set_result(self, frame: RemotingCommand) -> None:
        """The answer, read now (the connection's read loop)."""
        if self._state == 0:
            self._state, self._result = 1, frame
            self._end(drop=True)

    def set_exception(self, exc: BaseException) -> None:
        """The deadline passed or the connection closed (their loops tidy the heap)."""
        if self._state == 0:
            self._state, self._exc = 2, exc
            self._end(drop=False)

    def cancel(self) -> bool:
        """Withdraw the request: a late answer is dropped; ``on_done`` still runs."""
        if self._state != 0:
            return False
        self._state = 3
        self._end(drop=True)
        return True

    def _end(self, drop: bool) -> None:
        conn = self.conn
        conn.pending.pop(self.opaque, None)
        if self.entry is not None:
            self.entry[_FUT] = None
            conn._waiting -= 1
            if drop:
                conn._drop_ended()
        try:
            self.on_done(self)
        except Exception:  # the caller's bug must not break the read loop or the timer
            log.exception("the answer callback of a request to %s failed", conn.peer)
