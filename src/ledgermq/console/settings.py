"""The console's settings, checked once at start-up: a bad value stops ``ledgermq console``
with a message naming the option rather than serving something half-configured."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ledgermq.acl.signing import Credentials
from ledgermq.client.tls import TlsOptions

DEFAULT_PORT = 8080  # rocketmq-dashboard's


class ConsoleSettingsError(ValueError):
    """A setting cannot be used; the message names the option."""


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the console on this machine (``localhost`` counts)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    namesrv: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    users_file: Path | None = None
    """rocketmq-dashboard's users.properties (``name=password[,1]``; 1 is an admin). None: no
    login, everyone is an admin; allowed only on a loopback address unless ``open_without_login``."""
    open_without_login: bool = False
    credentials: Credentials | None = None
    """ACL credentials every request to the cluster is signed with."""
    tls: TlsOptions | None = None
    """Every connection to the cluster over TLS with these options (None: plain)."""
    controller_addrs: str | None = None
    """Controller mode: the controller(s), ``host:port[;host:port]``, for SyncStateSets. None:
    found by itself (controller_view.py), which covers a controller inside the name servers."""
    refresh_ms: int = 2000
    """How often live parts of a page (roles, lag) refresh while the page is visible."""
    cache_s: float = 1.0
    """Answers shared by every open page for this long: ten tabs cost the brokers one."""
    trend_interval_s: float = 5.0
    trend_points: int = 120
    request_timeout_s: float = 3.0
    session_ttl_s: float = 8 * 3600.0

    def __post_init__(self) -> None:
        if not self.namesrv.strip():
            raise ConsoleSettingsError("--namesrv: a name server address is required (host:port[;host:port])")
        if not 0 <= self.port < 65536:
            raise ConsoleSettingsError(f"--port {self.port}: not a port (0..65535)")
        if self.users_file is None and not is_loopback(self.host) and not self.open_without_login:
            raise ConsoleSettingsError(
                f"--host {self.host}: the console would be reachable from other machines without a login; "
                "give --users-file (or --open-without-login to really mean it)"
            )
        for name, value in (
            ("refresh_ms", self.refresh_ms),
            ("cache_s", self.cache_s),
            ("trend_interval_s", self.trend_interval_s),
            ("trend_points", self.trend_points),
            ("request_timeout_s", self.request_timeout_s),
            ("session_ttl_s", self.session_ttl_s),
        ):
            if value <= 0:
                raise ConsoleSettingsError(f"{name} {value}: must be positive")

    @property
    def login_required(self) -> bool:
        return self.users_file is not None
