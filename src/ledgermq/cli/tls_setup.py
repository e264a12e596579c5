"""The TLS of a server process, read from its config file at start-up and installed for the
whole process (net/tls/profile.py): every port it listens on and every connection it makes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ledgermq.errors import ConfigError
from ledgermq.net.tls import profile
from ledgermq.net.tls.profile import TlsProfile
from ledgermq.net.tls.settings import TLS_KEYS, TlsSettings

USE_TLS = "useTLS"
"""RocketMQ's NettyClientConfig field, settable from broker.conf: the process's own connections
use TLS (the same switch as ``tls.enable``)."""

SERVER_TLS_KEYS = TLS_KEYS | {USE_TLS}
"""Keys a broker, name server or controller config may carry for TLS."""


def tls_settings(props: Mapping[str, str], conf: Path | None) -> TlsSettings:
    """``props``' TLS keys and the TLS config file's; ``useTLS`` counts as ``tls.enable``."""
    values = dict(props)
    use_tls = values.pop(USE_TLS, "").strip().lower()
    if use_tls:
        if use_tls not in ("true", "false"):
            raise ConfigError(f"{USE_TLS}={props[USE_TLS]!r}: expected true or false")
        enable = values.get("tls.enable", "").strip().lower()
        if enable and enable != use_tls:
            raise ConfigError(f"{USE_TLS}={use_tls} contradicts tls.enable={enable}")
        values["tls.enable"] = use_tls
    return TlsSettings.from_properties(values, base_dir=conf.parent if conf is not None else None)


def install_process_tls(props: Mapping[str, str], conf: Path | None) -> TlsProfile:
    """Read, build (a certificate that does not load stops start-up naming its key) and install."""
    prof = TlsProfile.from_settings(tls_settings(props, conf))
    profile.install(prof)
    return prof
