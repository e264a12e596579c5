"""RemotingClient: one pooled connection per address, requests with timeouts, oneway sends.

Like the Java and C++ clients, a client keeps a single connection per ``host:port`` and
reuses it for every request; a connection that failed or closed is replaced on the next
call. Requests the server sends back (broker-to-client calls) go to ``on_request``.
``sign`` (RocketMQ's client RPC hook) sees every request just before it is sent: ACL
credentials add AccessKey and Signature there (ledgermq.acl.signing).

``tls`` (by default the process's profile, net/tls/profile.py): connections are made over
TLS with the current client context; a failed handshake (an untrusted, expired or
wrong-host certificate) is logged once naming the server and raised as ``ConnectError``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from ledgermq.errors import LedgerError
from ledgermq.net.connection import Connection, ConnectionClosedError, PendingCall
from ledgermq.net.tls import profile
from ledgermq.net.tls.counters import COUNTERS, OUTBOUND, PLAIN, TLS
from ledgermq.net.tls.failures import classify
from ledgermq.net.tls.profile import PROCESS_TLS, ClientTls, ProcessDefault
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import DEFAULT_MAX_FRAME_SIZE

log = logging.getLogger(__name__)


class ConnectError(LedgerError):
    """The address could not be reached."""


def split_address(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {addr!r} is not host:port")
    return host, int(port)


class RemotingClient:
    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        on_request: Callable[[Connection, RemotingCommand], None] | None = None,
        sign: Callable[[RemotingCommand], None] | None = None,
        tls: ClientTls | ProcessDefault | None = PROCESS_TLS,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.tls = profile.client_tls(tls)
        self.max_frame_size = max_frame_size
        self.on_request = on_request
        self.sign = sign  # applied to every request sent through invoke/invoke_oneway (ACL)
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}

    def open_connection(self, addr: str) -> Connection | None:
        """The pooled connection to ``addr`` if it is open now (no connecting, no waiting)."""
        conn = self._connections.get(addr)
        return conn if conn is not None and conn.is_open else None

    async def connection(self, addr: str) -> Connection:
        conn = self._connections.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._connect(addr)
            self._connections[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._connecting.pop(addr, None)

    async def _connect(self, addr: str) -> Connection:
        host, port = split_address(addr)
        loop = asyncio.get_running_loop()
        tls = self.tls
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
            # coincides with the connection completing (and leave that connection open).
            async with asyncio.timeout(self.connect_timeout):
                conn = Connection(self.on_request, max_frame_size=self.max_frame_size)
                if tls is None:
                    await loop.create_connection(lambda: conn, host, port)
                else:  # the protocol made here: uvloop hands back its own SSL protocol for TLS transports
                    await loop.create_connection(
                        lambda: conn,
                        host,
                        port,
                        ssl=tls.contexts.get(),
                        server_hostname=host,
                        ssl_handshake_timeout=tls.handshake_timeout,
                    )
        except ssl.SSLError as exc:
            reason, sentence = classify(exc)
            COUNTERS.failed(OUTBOUND, reason)
            log.warning("TLS: refused %s: %s", addr, sentence)
            raise ConnectError(f"cannot connect to {addr}: TLS: {sentence}") from exc
        except (OSError, TimeoutError, OverflowError) as exc:
            raise ConnectError(f"cannot connect to {addr}: {exc or 'timeout'}") from exc
        COUNTERS.connected(OUTBOUND, PLAIN if tls is None else TLS)
        return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if self.sign is not None:
            self.sign(cmd)
        conn = self._connections.get(addr)
        if conn is None or not conn.is_open:  # the pooled one, else without a coroutine per call
            conn = await self.connection(addr)
        try:
            return await conn.request(cmd, timeout)
        except ConnectionClosedError:
            self._connections.pop(addr, None)
            raise

    def start_invoke(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout: float,
        on_done: Callable[[PendingCall], None],
    ) -> PendingCall | None:
        """``invoke`` without a coroutine, on the pooled connection if it is open now (None
        when there is none: connect with ``invoke``). See ``Connection.start_request``."""
        conn = self._connections.get(addr)
        if conn is None or not conn.is_open:
            return None
        if self.sign is not None:
            self.sign(cmd)
        return conn.start_request(cmd, timeout, on_done)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        if self.sign is not None:
            self.sign(cmd)
        conn = await self.connection(addr)
        conn.oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._connections.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                async with asyncio.timeout(1.0):
                    await conn.closed.wait()
            except TimeoutError:
                log.debug("connection to %s did not close in time", conn.peer)
