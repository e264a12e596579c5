"""RemotingServer: accept connections, dispatch each request to the processor for its code.

A processor is registered by request code and returns the response (the server fills in
opaque, flag and serialization), None for oneway handling, or an awaitable of either. It
is called where the frame is read: one that can answer at once (a send that needs no
flush or slave wait) returns the answer and costs no task, no extra frames and no loop
turn. A returned ``Deferred`` (a send waiting for its fsync or its slave) is answered
from its listener as soon as it is resolved, again without a task; an awaitable
(``async def`` processors) runs as a task of its own. The server owns the rules every processor would
otherwise repeat:

* unknown codes get REQUEST_CODE_NOT_SUPPORTED (remark " request type N not supported");
* a processor exception becomes SYSTEM_ERROR with the exception text as remark;
* oneway requests are never answered;
* a ``gate`` (the broker's ACL) sees every request first and may answer it instead;
* a malformed header with a readable opaque gets SYSTEM_ERROR; without one the
  connection closes with a logged reason;
* more than ``max_inflight_per_connection`` requests in progress from one connection, or
  ``max_inflight_total`` overall, get SYSTEM_BUSY at once (RocketMQ's "[OVERLOAD]"
  answer), so a flood costs bounded memory and other clients keep being served;
* connections silent for ``idle_timeout`` seconds are closed (RocketMQ: 120 s).

TLS (``tls``, by default the process's profile, net/tls/profile.py): a port in disabled mode
is the plain ``create_server`` it always was; a permissive or enforcing port accepts through
``TlsListener``, which peeks each connection's first byte and makes a TLS or a plain
transport (or refuses it) before the connection exists, so requests are handled the same
either way.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ledgermq.net.connection import Connection
from ledgermq.net.read_round import ReadRound
from ledgermq.net.tls import profile
from ledgermq.net.tls.counters import COUNTERS, INBOUND, PLAIN
from ledgermq.net.tls.listener import TlsListener
from ledgermq.net.tls.profile import PROCESS_TLS, ProcessDefault, ServerTls
from ledgermq.protocol.codes import ResponseCode, request_name
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, BadFrame

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestContext:
    """What a processor may know about the request beyond its command (one per request:
    nothing in it is built unless asked for)."""

    connection: Connection
    server: RemotingServer

    @property
    def peer(self) -> str:
        return self.connection.peer

    def park(self) -> None:
        """This request is about to wait a long time (a held pull): stop counting it as load."""
        self.connection.inflight -= 1
        self.server.inflight -= 1

    def unpark(self) -> None:
        self.connection.inflight += 1
        self.server.inflight += 1


Answer = RemotingCommand | None


class Deferred:
    """An answer a processor gives later from a callback of its own (a send released by
    its slave's acknowledgement or its fsync). Unlike an ``asyncio.Future``, resolving it
    tells its listeners at once, not in a later loop turn: the answer is queued for the
    write within the turn that released it.

    The two listeners every held send has (the server's answer to its connection and the
    broker's latency count) sit in slots of their own: a held send then costs this one
    object, not a listener list, a closure with its cells and a partial besides (counted:
    six allocations fewer per SYNC_FLUSH or SYNC_MASTER send, each of them a young object
    the collector walks while the send waits). Other listeners go to a list."""

    __slots__ = ("_answer", "_code", "_conn", "_done", "_listeners", "_observer", "_request", "_server", "_started")

    def __init__(self) -> None:
        self._listeners: list[Callable[[Answer], None]] | None = None
        self._answer: Answer = None
        self._done = False
        self._observer: AnswerObserver | None = None
        self._code = 0
        self._started = 0.0
        self._server: RemotingServer | None = None
        self._conn: Connection | None = None
        self._request: RemotingCommand | None = None

    def resolve(self, answer: Answer) -> None:
        if self._done:
            return
        self._done = True
        self._answer = answer
        observer = self._observer
        if observer is not None:
            try:
                observer(self._code, -1 if answer is None else answer.code, self._started)
            except Exception:
                log.exception("a deferred answer's observer failed")
        server = self._server
        if server is not None:
            assert self._conn is not None and self._request is not None
            try:
                server._done(self._conn, self._request, answer)
            except Exception:
                log.exception("answering a deferred request failed")
        listeners, self._listeners = self._listeners, None
        if listeners:
            for listener in listeners:
                try:
                    listener(answer)
                except Exception:
                    log.exception("a deferred answer's listener failed")

    def observe(self, observer: AnswerObserver, request_code: int, started: float) -> None:
        """Tell ``observer(request_code, response code or -1, started)`` first when resolved
        (one observer; the broker counts the request's latency with it)."""
        if self._done:
            answer = self._answer
            observer(request_code, -1 if answer is None else answer.code, started)
            return
        self._observer = observer
        self._code = request_code
        self._started = started

    def add_listener(self, listener: Callable[[Answer], None]) -> None:
        if self._done:
            listener(self._answer)
        elif self._listeners is None:
            self._listeners = [listener]
        else:
            self._listeners.append(listener)

    def _answer_through(self, server: RemotingServer, conn: Connection, request: RemotingCommand) -> None:
        """The server's own listener (``RemotingServer._take``): answer ``request`` on ``conn``."""
        if self._done:
            server._done(conn, request, self._answer)
            return
        self._server = server
        self._conn = conn
        self._request = request

    async def wait(self) -> Answer:
        """For a coroutine that needs the answer itself."""
        if self._done:
            return self._answer
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.add_listener(lambda answer: None if fut.done() else fut.set_result(answer))
        return await fut


AnswerObserver = Callable[[int, int, float], None]
"""Told (request code, response code or -1 for none, when the request started) once a
``Deferred`` is resolved."""


Processor = Callable[[RequestContext, RemotingCommand], Answer | Deferred | Awaitable[Answer]]
InlineProcessor = Callable[[RequestContext, RemotingCommand], RemotingCommand | None]
"""A processor that never waits: run where the frame is read, without a task of its own."""
Gate = Callable[[Connection, RemotingCommand], RemotingCommand | None]
"""Asked before any processor (the broker's ACL): None lets the request through, a command
is the refusal sent instead (RocketMQ's server-side RPC hook). It must be thread-safe: a
request with a body of GATE_IN_THREAD_BODY bytes or more is checked in a worker thread (an
HMAC over 4 MiB takes ~2 ms, too long for the loop; hashlib releases the GIL)."""
GATE_IN_THREAD_BODY = 256 * 1024


class RemotingServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        name: str = "remoting",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_inflight_per_connection: int = 256,
        max_inflight_total: int = 10_000,
        idle_timeout: float = 120.0,
        tls: ServerTls | ProcessDefault | None = PROCESS_TLS,
        read_round: ReadRound | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.max_frame_size = max_frame_size
        self.max_inflight_per_connection = max_inflight_per_connection
        self.max_inflight_total = max_inflight_total
        self.idle_timeout = idle_timeout
        self.tls = profile.server_tls(tls)
        self.processors: dict[int, Processor] = {}
        self.inline_processors: dict[int, InlineProcessor] = {}
        self.connections: set[Connection] = set()
        self.on_disconnect: list[Callable[[Connection], None]] = []
        self.gate: Gate | None = None
        self.inflight = 0
        # Shared by every connection: what a read answers leaves at its end, after which
        # ``read_round.on_end`` runs (a broker's write turn), net/read_round.py.
        self.read_round = read_round if read_round is not None else ReadRound()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle_task: asyncio.Task[None] | None = None
        self._tls_listener: TlsListener | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    def register_inline(self, code: int, processor: InlineProcessor) -> None:
        """For requests answered without waiting on anything (Raft's peer messages): a task
        per request would cost more than the work, and a loop turn of latency."""
        self.inline_processors[int(code)] = processor

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            self._server = await loop.create_server(
                self._new_plain_connection, self.host, self.port, reuse_address=True
            )
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            listener = socket.create_server((self.host, self.port), family=family, backlog=1024)
            self.port = listener.getsockname()[1]
            self._tls_listener = TlsListener(f"{self.name} port {self.port}", listener, self.tls, self._new_connection)
            self._tls_listener.start()
        self._idle_task = asyncio.create_task(self._close_idle_connections())
        tls = f" (TLS {self.tls.mode.value})" if self.tls is not None else ""
        log.info("%s listening on %s:%d%s", self.name, self.host, self.port, tls)

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        listener, self._tls_listener = self._tls_listener, None
        if listener is not None:
            await listener.close()
        for conn in list(self.connections):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _new_plain_connection(self) -> Connection:
        COUNTERS.connected(INBOUND, PLAIN)
        return self._new_connection()

    def _new_connection(self) -> Connection:
        conn = Connection(
            self._on_request,
            self._on_bad_frame,
            self._on_close,
            max_frame_size=self.max_frame_size,
            read_round=self.read_round,
        )
        self.connections.add(conn)
        return conn

    def _on_close(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for callback in self.on_disconnect:
            try:
                callback(conn)
            except Exception:
                log.exception("%s: disconnect callback failed for %s", self.name, conn.peer)

    # -- dispatch --------------------------------------------------------------------
    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        gate_in_thread = self.gate is not None and len(cmd.body) >= GATE_IN_THREAD_BODY
        if self.gate is not None and not (gate_in_thread and cmd.code in self.processors):
            refusal = self.gate(conn, cmd)
            if refusal is not None:
                self._answer(conn, cmd, refusal)
                return
        inline = self.inline_processors.get(cmd.code)
        if inline is not None:
            self._run_inline(inline, conn, cmd)
            return
        processor = self.processors.get(cmd.code)
        if processor is None:
            self._answer(
                conn,
                cmd,
                cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"),
            )
            return
        if conn.inflight >= self.max_inflight_per_connection or self.inflight >= self.max_inflight_total:
            self._answer(
                conn,
                cmd,
                cmd.response(
                    ResponseCode.SYSTEM_BUSY,
                    "[OVERLOAD]system busy, too many requests in progress; try again later",
                ),
            )
            return
        conn.inflight += 1
        self.inflight += 1
        if gate_in_thread:
            self._spawn(self._run_gated(processor, conn, cmd))
            return
        try:
            outcome: Answer | Deferred | Awaitable[Answer] = processor(RequestContext(conn, self), cmd)
        except Exception as exc:
            outcome = self._failed(conn, cmd, exc)
        self._take(conn, cmd, outcome)

    def _take(self, conn: Connection, cmd: RemotingCommand, outcome: Answer | Deferred | Awaitable[Answer]) -> None:
        """Answer now; when a ``Deferred`` is resolved (no task); or from a task."""
        if outcome is None or isinstance(outcome, RemotingCommand):
            self._done(conn, cmd, outcome)
        elif isinstance(outcome, Deferred):  # answered when resolved, within the turn that resolves it
            outcome._answer_through(self, conn, cmd)
        else:
            self._spawn(self._run(outcome, conn, cmd))

    def _done(self, conn: Connection, cmd: RemotingCommand, answer: Answer) -> None:
        conn.inflight -= 1
        self.inflight -= 1
        if answer is not None:
            self._answer(conn, cmd, answer)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _failed(self, conn: Connection, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        log.error("%s: %s from %s failed", self.name, request_name(cmd.code), conn.peer, exc_info=exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    async def _run_gated(self, processor: Processor, conn: Connection, cmd: RemotingCommand) -> None:
        """A large request: the gate checks it in a worker thread before the processor runs."""
        try:
            refusal = await asyncio.to_thread(self.gate, conn, cmd) if self.gate is not None else None
            if refusal is not None:
                outcome: Answer | Deferred | Awaitable[Answer] = refusal
            else:
                outcome = processor(RequestContext(conn, self), cmd)
        except Exception as exc:
            outcome = self._failed(conn, cmd, exc)
        self._take(conn, cmd, outcome)

    async def _run(self, outcome: Awaitable[Answer], conn: Connection, cmd: RemotingCommand) -> None:
        try:
            response = await outcome
        except Exception as exc:
            response = self._failed(conn, cmd, exc)
        except BaseException:
            if isinstance(outcome, Coroutine):
                outcome.close()  # cancelled before its first step: it was never awaited
            raise
        finally:
            conn.inflight -= 1
            self.inflight -= 1
        if response is not None:
            self._answer(conn, cmd, response)

    def _run_inline(self, processor: InlineProcessor, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            response = processor(RequestContext(conn, self), cmd)
        except Exception as exc:
            log.exception("%s: %s from %s failed", self.name, request_name(cmd.code), conn.peer)
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:
            self._answer(conn, cmd, response)

    def _answer(self, conn: Connection, request: RemotingCommand, response: RemotingCommand) -> None:
        if request.is_oneway or not conn.is_open:
            return
        response.opaque = request.opaque
        response.flag |= 0x1
        response.serialize_type = request.serialize_type
        try:
            conn.send(response)
        except Exception:
            log.debug("%s: could not answer %s", self.name, conn.peer, exc_info=True)

    def _on_bad_frame(self, conn: Connection, frame: BadFrame) -> None:
        if frame.opaque is None:
            log.warning("%s: closing %s: malformed frame: %s", self.name, conn.peer, frame.reason)
            conn.close()
            return
        log.warning("%s: malformed request from %s: %s", self.name, conn.peer, frame.reason)
        reply = RemotingCommand(
            code=ResponseCode.SYSTEM_ERROR,
            opaque=frame.opaque,
            flag=0x1,
            remark=f"malformed request: {frame.reason}",
        )
        try:
            conn.send(reply)
        except Exception:
            conn.close()

    async def _close_idle_connections(self) -> None:
        loop = asyncio.get_running_loop()
        interval = max(0.05, min(self.idle_timeout / 4, 10.0))
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                if now - conn.last_active > self.idle_timeout and conn.inflight == 0:
                    log.info("%s: closing idle connection %s", self.name, conn.peer)
                    conn.close()
