"""A process's TLS: what its server ports take and how its own connections connect.

RocketMQ keeps its TLS settings in static fields every server and client of the JVM reads
(``TlsSystemConfig``); so does ledgermq: a server process (``ledgermq broker``, ``namesrv``,
``controller``) installs its ``TlsProfile`` once at start-up, and every ``RemotingServer``,
``RemotingClient`` and HA socket made in that process without a TLS argument of its own
follows it. Its remoting port, HA port, DLedger and controller Raft ports, registration,
broker-to-broker calls and replication links are thus covered by one setting, as in
RocketMQ, and a link added later cannot forget TLS. Library users (the client, the admin
client, Spark) pass their own ``ClientTls`` and never depend on the installed profile.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from ledgermq.net.tls.contexts import ContextSource, client_source, server_source
from ledgermq.net.tls.settings import TlsMode, TlsSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerTls:
    """What a server port takes: plain, TLS or both (``mode``), with the current context."""

    mode: TlsMode
    contexts: ContextSource
    handshake_timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class ClientTls:
    """How connections to TLS servers are made."""

    contexts: ContextSource
    handshake_timeout: float = 10.0

    @classmethod
    def from_settings(cls, settings: TlsSettings) -> ClientTls:
        return cls(client_source(settings), settings.handshake_timeout_ms / 1000)


@dataclass(frozen=True, slots=True)
class TlsProfile:
    settings: TlsSettings
    server: ServerTls | None
    client: ClientTls | None

    @classmethod
    def from_settings(cls, settings: TlsSettings) -> TlsProfile:
        """Contexts are built now: a certificate that cannot be loaded stops start-up."""
        timeout = settings.handshake_timeout_ms / 1000
        server = ServerTls(settings.server_mode, server_source(settings), timeout) if settings.server_on else None
        client = ClientTls.from_settings(settings) if settings.enable else None
        return cls(settings, server, client)


class _Process(enum.Enum):
    TLS = "the process's TLS profile"


PROCESS_TLS = _Process.TLS
"""The default TLS argument of servers and clients: follow the installed profile."""
ProcessDefault = _Process

_installed: TlsProfile | None = None


def install(profile: TlsProfile | None) -> None:
    """Make ``profile`` the process's (None: plain everywhere again)."""
    global _installed
    _installed = profile
    if profile is not None and (profile.server is not None or profile.client is not None):
        log.info("TLS: %s", profile.settings.describe())


def installed() -> TlsProfile | None:
    return _installed


def server_tls(tls: ServerTls | _Process | None) -> ServerTls | None:
    if tls is PROCESS_TLS:
        return _installed.server if _installed is not None else None
    return tls


def client_tls(tls: ClientTls | _Process | None) -> ClientTls | None:
    if tls is PROCESS_TLS:
        return _installed.client if _installed is not None else None
    return tls
