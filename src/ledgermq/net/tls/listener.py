"""Accepting on a port that takes TLS: permissive (TLS or plain) or enforcing (TLS only).

Each accepted socket is looked at before any transport exists: its first byte is peeked
(``MSG_PEEK``, so nothing is consumed). 0x16, a TLS handshake record, goes to a TLS
transport made with the current context (``ContextSource``); anything else becomes a plain
transport in permissive mode, exactly the transport a disabled port makes, so plain
traffic pays nothing after the accept, and is refused in enforcing mode. Both rules are
RocketMQ's (``NettyRemotingServer.TlsModeHandler``). Every refusal (a plain connection on
an enforcing port, an expired, untrusted or missing client certificate, a silent or
broken handshake) is one log line naming the peer and the reason, and a counted failure.

A port in disabled mode does not come here: ``RemotingServer`` keeps its plain
``create_server`` path unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from ledgermq.net.tls.counters import COUNTERS, INBOUND, PLAIN, TLS
from ledgermq.net.tls.failures import PLAIN_ON_ENFORCING, TIMEOUT, classify
from ledgermq.net.tls.profile import ServerTls
from ledgermq.net.tls.settings import TlsMode

log = logging.getLogger(__name__)

TLS_HANDSHAKE_BYTE = 0x16


async def first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The first byte the peer sent, left unread; None if it closed before sending any."""
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            fut: asyncio.Future[None] = loop.create_future()
            fd = sock.fileno()
            loop.add_reader(fd, _wake, fut)
            try:
                await fut
            finally:
                loop.remove_reader(fd)
            continue
        return data[0] if data else None


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def peer_name(address: object) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)


class TlsListener:
    """Accepts on ``listener`` and makes each connection with ``protocol_factory``, over TLS
    or plain as ``tls.mode`` allows."""

    def __init__(
        self, name: str, listener: socket.socket, tls: ServerTls, protocol_factory: Callable[[], asyncio.Protocol]
    ) -> None:
        self.name = name
        self.listener = listener
        self.tls = tls
        self.protocol_factory = protocol_factory
        self._accept_task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.listener.setblocking(False)
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop(), name=f"tls-accept-{self.name}")

    async def close(self) -> None:
        task, self._accept_task = self._accept_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.listener.close()
        pending = list(self._pending)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(self.listener)
            except OSError as exc:  # EMFILE and friends: keep the port, try again shortly
                log.error("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            task = loop.create_task(self._take(loop, sock, peer_name(address)))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _take(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, peer: str) -> None:
        tls = self.tls
        handed_over = False
        try:
            try:
                async with asyncio.timeout(tls.handshake_timeout):
                    first = await first_byte(loop, sock)
            except TimeoutError:
                self._refuse(peer, TIMEOUT, "sent nothing within the handshake timeout")
                return
            if first is None:
                return  # connected and left (a port probe)
            if first != TLS_HANDSHAKE_BYTE:
                if tls.mode is TlsMode.ENFORCING:
                    self._refuse(peer, PLAIN_ON_ENFORCING, "a plain (non-TLS) connection, and this port enforces TLS")
                    return
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.connect_accepted_socket(self.protocol_factory, sock)
                handed_over = True
                COUNTERS.connected(INBOUND, PLAIN)
                return
            try:
                await loop.connect_accepted_socket(
                    self.protocol_factory, sock, ssl=tls.contexts.get(), ssl_handshake_timeout=tls.handshake_timeout
                )
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                reason, sentence = classify(exc)
                self._refuse(peer, reason, sentence)
                return
            handed_over = True
            COUNTERS.connected(INBOUND, TLS)
        except asyncio.CancelledError:
            raise
        except Exception:  # never die silently: this connection is lost, the port keeps serving
            log.exception("%s: could not take the connection from %s", self.name, peer)
        finally:
            if not handed_over:
                sock.close()

    def _refuse(self, peer: str, reason: str, sentence: str) -> None:
        COUNTERS.failed(INBOUND, reason)
        log.warning("TLS: refused %s on %s: %s", peer, self.name, sentence)
