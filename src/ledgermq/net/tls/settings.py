"""TLS settings under RocketMQ 4.x's key names (``TlsSystemConfig``), read as RocketMQ reads them.

RocketMQ takes ``tls.server.mode`` and ``tls.enable`` from its own settings and every other
``tls.*`` key from the TLS config file (``tls.config.file``) when that file exists, the file
winning. ledgermq reads the same keys from a broker's, name server's or controller's config
file and then from the TLS config file it names, the file winning for every key but the
mode, ``tls.enable`` and ``tls.config.file`` itself, as in RocketMQ.

Where ledgermq differs, it is stricter, never weaker, and says so at start-up:

* the server mode defaults to ``disabled`` (RocketMQ: ``permissive`` with a throw-away
  self-signed certificate that no client can verify);
* a value RocketMQ would silently replace (an unknown mode or client-auth value) stops
  start-up naming the key;
* a client certificate the server asks for is always verified (RocketMQ with
  ``tls.server.authClient=false`` accepts any certificate; Python's ssl module cannot), so
  that combination needs ``tls.server.trustCertPath``;
* with ``tls.client.authServer=true`` the server's name is checked against its certificate
  too (``tls.client.verifyHostname``, ledgermq's own, default true); RocketMQ checks only
  the chain.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledgermq.config import config_from_properties, key, known_keys, parse_properties
from ledgermq.errors import ConfigError

log = logging.getLogger(__name__)

ROCKETMQ_DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"
"""Read when no ``tls.config.file`` is given and TLS is in use, as RocketMQ does."""

_NOT_FROM_FILE = ("tls.server.mode", "tls.enable", "tls.config.file")


class TlsMode(enum.Enum):
    """What a server port takes (RocketMQ ``TlsMode``)."""

    DISABLED = "disabled"  # plain connections only
    PERMISSIVE = "permissive"  # TLS and plain on the same port, told apart by the first byte
    ENFORCING = "enforcing"  # TLS only: a plain connection is refused with a logged reason

    @classmethod
    def _missing_(cls, value: object) -> TlsMode | None:
        return next((m for m in cls if isinstance(value, str) and m.value == value.strip().lower()), None)


class ClientAuth(enum.Enum):
    """Whether a server asks clients for a certificate (``tls.server.need.client.auth``)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"

    @classmethod
    def _missing_(cls, value: object) -> ClientAuth | None:
        return next((m for m in cls if isinstance(value, str) and m.value == value.strip().lower()), None)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Every TLS key of a process; defaults as RocketMQ 4.x's except ``server_mode``."""

    server_mode: TlsMode = key("tls.server.mode", TlsMode.DISABLED)
    enable: bool = key("tls.enable", False)
    """The process's own connections (registration, replication, Raft, broker to broker) use
    TLS. Unset, it follows the mode: true when enforcing (RocketMQ's NettyClientConfig)."""
    config_file: str = key("tls.config.file", "")
    test_mode: bool = key("tls.test.mode.enable", True)
    """RocketMQ's test mode: the server makes a self-signed certificate, clients trust any."""
    server_need_client_auth: ClientAuth = key("tls.server.need.client.auth", ClientAuth.NONE)
    server_key_path: str = key("tls.server.keyPath", "")
    server_key_password: str = key("tls.server.keyPassword", "")
    server_cert_path: str = key("tls.server.certPath", "")
    server_auth_client: bool = key("tls.server.authClient", False)
    server_trust_cert_path: str = key("tls.server.trustCertPath", "")
    client_key_path: str = key("tls.client.keyPath", "")
    client_key_password: str = key("tls.client.keyPassword", "")
    client_cert_path: str = key("tls.client.certPath", "")
    client_auth_server: bool = key("tls.client.authServer", False)
    client_trust_cert_path: str = key("tls.client.trustCertPath", "")
    # ledgermq's own
    client_verify_hostname: bool = key("tls.client.verifyHostname", True)
    reload_interval_ms: int = key("tls.reloadIntervalMs", 2000)
    """How often, at most, the certificate files are looked at for a change."""
    handshake_timeout_ms: int = key("tls.handshakeTimeoutMs", 10_000)

    def __post_init__(self) -> None:
        if self.reload_interval_ms < 100:
            raise ConfigError("tls.reloadIntervalMs must be at least 100")
        if self.handshake_timeout_ms <= 0:
            raise ConfigError("tls.handshakeTimeoutMs must be positive")
        if self.server_mode is not TlsMode.DISABLED:
            self._check_server()
        if self.enable:
            self._check_client()

    def _check_server(self) -> None:
        mode = f"tls.server.mode={self.server_mode.value}"
        if self.test_mode:
            if self.server_cert_path or self.server_key_path:
                raise ConfigError(
                    f"{mode} with tls.test.mode.enable=true (RocketMQ's default) would ignore tls.server.certPath "
                    "and tls.server.keyPath for a self-signed certificate: set tls.test.mode.enable=false"
                )
            return
        if not (self.server_cert_path and self.server_key_path):
            raise ConfigError(f"{mode} needs tls.server.certPath and tls.server.keyPath (or tls.test.mode.enable=true)")
        if self.server_need_client_auth is not ClientAuth.NONE and not self.server_trust_cert_path:
            raise ConfigError(
                f"tls.server.need.client.auth={self.server_need_client_auth.value} needs tls.server.trustCertPath: "
                "ledgermq verifies every client certificate it asks for"
            )

    def _check_client(self) -> None:
        if bool(self.client_cert_path) != bool(self.client_key_path):
            raise ConfigError("tls.client.certPath and tls.client.keyPath go together")

    @property
    def server_on(self) -> bool:
        return self.server_mode is not TlsMode.DISABLED

    @property
    def verifies_server(self) -> bool:
        """Clients check the server's chain (RocketMQ: only with authServer, never in test mode)."""
        return self.client_auth_server and not self.test_mode

    def watched_files(self) -> tuple[str, ...]:
        """The certificate files whose change makes new connections use a rebuilt context."""
        paths = (
            self.server_cert_path,
            self.server_key_path,
            self.server_trust_cert_path,
            self.client_cert_path,
            self.client_key_path,
            self.client_trust_cert_path,
        )
        return tuple(dict.fromkeys(p for p in paths if p))

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, base_dir: Path | None = None) -> TlsSettings:
        """The keys in ``props``, then those of the TLS config file (which win, as in RocketMQ).

        A missing or unreadable file that was named stops start-up; RocketMQ's default path
        is read only when it exists and TLS is in use. Relative paths in the TLS file are
        taken from the file's directory, relative paths in ``props`` from ``base_dir``."""
        values = {k: v for k, v in props.items() if k.startswith("tls.") and v.strip()}  # blank: not set
        _check_mode_value(values)
        if "tls.enable" not in values:  # RocketMQ: useTLS defaults to "the mode is enforcing"
            mode = TlsMode(values.get("tls.server.mode", TlsMode.DISABLED.value) or TlsMode.DISABLED.value)
            values["tls.enable"] = "true" if mode is TlsMode.ENFORCING else "false"
        values = _resolve_paths(values, base_dir)
        named = values.get("tls.config.file", "").strip()
        in_use = values.get("tls.server.mode", "disabled").strip().lower() != "disabled" or _true(values["tls.enable"])
        path = Path(named) if named else Path(ROCKETMQ_DEFAULT_CONFIG_FILE)
        if named or (in_use and path.is_file()):
            try:
                file_props = parse_properties(path.read_text())
            except OSError as exc:
                raise ConfigError(f"tls.config.file={path}: cannot read it: {exc}") from exc
            file_props = {k: v for k, v in file_props.items() if k.startswith("tls.") and v.strip()}
            _check_mode_value(file_props)
            file_props = _resolve_paths(file_props, path.parent)
            for k in _NOT_FROM_FILE:
                file_props.pop(k, None)
            unknown = sorted(set(file_props) - known_keys(cls))
            for k in unknown:
                log.warning("%s: unknown TLS key %r ignored", path, k)
            values.update(file_props)
            values["tls.config.file"] = str(path)
            log.info("TLS settings read from %s", path)
        return config_from_properties(cls, values)

    def describe(self) -> str:
        """One line for the start-up log (no passwords)."""
        parts = [f"mode={self.server_mode.value}", f"client={'tls' if self.enable else 'plain'}"]
        if self.test_mode:
            parts.append("test-mode (self-signed, trusts any)")
        if self.server_on and not self.test_mode:
            parts.append(f"clientAuth={self.server_need_client_auth.value}")
        if self.enable and not self.test_mode:
            parts.append("verifies server" if self.verifies_server else "trusts any server")
        return ", ".join(parts)

    def replace(self, **changes: Any) -> TlsSettings:
        return dataclasses.replace(self, **changes)


def _true(value: str) -> bool:
    return value.strip().lower() == "true"


def _check_mode_value(values: Mapping[str, str]) -> None:
    for name, typ in (("tls.server.mode", TlsMode), ("tls.server.need.client.auth", ClientAuth)):
        raw = values.get(name)
        if raw is not None and raw.strip():
            try:
                typ(raw)
            except ValueError:
                allowed = ", ".join(m.value for m in typ)
                raise ConfigError(f"{name}={raw!r}: expected one of {allowed}") from None


_PATH_KEYS = frozenset(
    f"tls.{side}.{name}" for side in ("server", "client") for name in ("keyPath", "certPath", "trustCertPath")
) | {"tls.config.file"}


def _resolve_paths(values: Mapping[str, str], base: Path | None) -> dict[str, str]:
    out = dict(values)
    for k in _PATH_KEYS & set(out):
        raw = out[k].strip()
        if raw:
            p = Path(raw).expanduser()
            out[k] = str(p if p.is_absolute() or base is None else base / p)
    return out


TLS_KEYS = known_keys(TlsSettings)
"""Every key TlsSettings reads: a config file may carry them (config_keys.py)."""
