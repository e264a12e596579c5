"""TLS for code that drives a raw non-blocking socket itself (the HA master and slave).

The HA link writes with ``sendmsg``, reads with ``recv_into`` and waits with its own
reader callbacks: an ``ssl.SSLSocket`` offers none of that on a non-blocking loop. So
``secure_accepted`` / ``secure_connected`` leave the HA code its plain socket and put TLS
underneath: they hand back one end of a local socket pair, and pump the other end through
an asyncio TLS transport to the real peer (both directions, with back-pressure: a side
whose writes pile up pauses reading on the other). Closing either end closes the other
after what was written has left. The HA code does not change; TLS costs one local hop.

Without TLS for the process (``profile.installed()``), both return the socket untouched.
The accept side peeks the first byte like ``TlsListener`` (permissive takes a plain slave
too, enforcing refuses it with a logged line).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import cast

from ledgermq.net.tls import profile
from ledgermq.net.tls.counters import COUNTERS, INBOUND, OUTBOUND, PLAIN, TLS
from ledgermq.net.tls.failures import PLAIN_ON_ENFORCING, TIMEOUT, classify
from ledgermq.net.tls.listener import TLS_HANDSHAKE_BYTE, first_byte
from ledgermq.net.tls.settings import TlsMode

log = logging.getLogger(__name__)

_HIGH_WATER = 1024 * 1024
_PLAIN_REFUSED = "a plain (non-TLS) connection, and this port enforces TLS"


class TlsRefused(ConnectionError):
    """The peer's TLS (or its lack) was refused; the reason was logged once."""


class _Pump(asyncio.Protocol):
    """One side of the bridge: what it reads goes to ``other``'s transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Pump | None = None
        self._early: list[bytes] = []
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is None or other.transport is None:
            self._early.append(data)  # before the pair is joined (a TLS side's first records)
            return
        if not other.transport.is_closing():
            other.transport.write(data)

    def join(self, other: _Pump) -> None:
        self.other = other
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def eof_received(self) -> bool | None:
        self._close_other()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._close_other()

    def _close_other(self) -> None:
        other = self.other
        if other is not None and other.transport is not None and not other.transport.is_closing():
            other.transport.close()  # after its buffered writes leave

    def pause_writing(self) -> None:  # our writes pile up: stop reading the other side
        other = self.other
        if other is not None and other.transport is not None and not other.transport.is_closing():
            other.transport.pause_reading()

    def resume_writing(self) -> None:
        other = self.other
        if other is not None and other.transport is not None and not other.transport.is_closing():
            other.transport.resume_reading()


async def _bridge(outer: _Pump, loop: asyncio.AbstractEventLoop) -> socket.socket:
    """Join ``outer`` (the TLS transport) to one end of a new socket pair; the other end is
    the HA code's socket."""
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        theirs.setblocking(False)
        inner = _Pump()  # made here: uvloop returns its own SSL protocol, not ours, for TLS transports
        await loop.connect_accepted_socket(lambda: inner, ours)
    except BaseException:
        ours.close()
        theirs.close()
        if outer.transport is not None:
            outer.transport.close()
        raise
    inner.join(outer)
    outer.join(inner)
    return theirs


async def secure_accepted(sock: socket.socket, peer: str, port_name: str) -> socket.socket | None:
    """The socket the HA master should use for an accepted ``sock``: itself (no TLS, or a
    plain slave on a permissive port), a bridged TLS link, or None when refused (closed,
    logged, counted)."""
    prof = profile.installed()
    tls = prof.server if prof is not None else None
    if tls is None:
        return sock
    loop = asyncio.get_running_loop()
    try:
        try:
            async with asyncio.timeout(tls.handshake_timeout):
                first = await first_byte(loop, sock)
        except TimeoutError:
            _refuse(sock, peer, port_name, TIMEOUT, "sent nothing within the handshake timeout")
            return None
        if first is None:
            sock.close()
            return None
        if first != TLS_HANDSHAKE_BYTE:
            if tls.mode is TlsMode.ENFORCING:
                _refuse(sock, peer, port_name, PLAIN_ON_ENFORCING, _PLAIN_REFUSED)
                return None
            COUNTERS.connected(INBOUND, PLAIN)
            return sock
        outer = _Pump()
        try:
            await loop.connect_accepted_socket(
                lambda: outer, sock, ssl=tls.contexts.get(), ssl_handshake_timeout=tls.handshake_timeout
            )
        except (OSError, TimeoutError) as exc:
            reason, sentence = classify(exc)
            _refuse(sock, peer, port_name, reason, sentence)
            return None
        COUNTERS.connected(INBOUND, TLS)
        return await _bridge(outer, loop)
    except asyncio.CancelledError:
        sock.close()
        raise
    except Exception:  # never die silently: this connection is lost, the HA port keeps serving
        log.exception("%s: could not secure the connection from %s", port_name, peer)
        sock.close()
        return None


async def secure_connected(sock: socket.socket, host: str, peer: str) -> socket.socket:
    """The socket the HA slave should use for ``sock``, connected to ``peer`` (``host``'s
    name is checked against the certificate when so configured): itself without TLS, else a
    bridged TLS link. Raises ``TlsRefused`` (logged once) when the handshake fails."""
    prof = profile.installed()
    tls = prof.client if prof is not None else None
    if tls is None:
        return sock
    loop = asyncio.get_running_loop()
    outer = _Pump()
    try:
        await loop.create_connection(
            lambda: outer,
            sock=sock,
            ssl=tls.contexts.get(),
            server_hostname=host,
            ssl_handshake_timeout=tls.handshake_timeout,
        )
    except (OSError, TimeoutError) as exc:
        sock.close()
        reason, sentence = classify(exc)
        COUNTERS.failed(OUTBOUND, reason)
        log.warning("TLS: refused %s (HA master): %s", peer, sentence)
        raise TlsRefused(f"TLS with {peer} failed: {sentence}") from None
    COUNTERS.connected(OUTBOUND, TLS)
    return await _bridge(outer, loop)


def _refuse(sock: socket.socket, peer: str, port_name: str, reason: str, sentence: str) -> None:
    sock.close()
    COUNTERS.failed(INBOUND, reason)
    log.warning("TLS: refused %s on %s: %s", peer, port_name, sentence)
